# Backfills against concurrent DDL:
#
#   a rewriting ALTER (ALTER COLUMN ... TYPE) whose transaction holds the
#     table's lock while a chunk starts, twice per backfill, in each read
#     mode: every row arrives.  A chunk used to take its snapshot before it
#     waited for the lock, then read the rewritten heap, whose rows all
#     carry the ALTER's xid, under that snapshot: keyset read nothing and
#     marked the backfill done, ctid and bitmap skipped a window or a range.
#   a table that stops being published while it is backfilled (ALTER
#     PUBLICATION ... DROP TABLE, DROP PUBLICATION, alter_pipeline to another
#     publication, DETACH PARTITION under publish_via_partition_root) is
#     never read without its row filter and column list (an empty filter
#     used to mean every row and every column): the backfill is 'skipped'
#     (or the pipeline halts on the missing publication), and no row outside
#     the filter, no column outside the list, reaches the sink; also when
#     its owner lost SELECT on it meanwhile (no halt for a table no longer
#     published).
#   an update hidden by the row filter or publish actions of its time,
#     committed after a chunk's snapshot, and the publication widened before
#     the chunk read its filter: the chunk used to deliver the row as of its
#     snapshot, a version the update had replaced, for good.
#   an ALTER TABLE on a partitioned table while a chunk of one of its
#     partitions (published via the root) holds the partition's lock: the
#     chunk locked the partition before its root, the ALTER the root before
#     the partition, and one of them died of a deadlock.
#   a TRUNCATE the publication does not publish, issued after a chunk's
#     snapshot: the sink keeps the chunk's rows, as a subscriber keeps its
#     rows (no defect; see the case).
#
# versions: all (publication semantics: tables leaving a publication, partitions detached)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('backfill_races');

sub query { return $node->safe_psql('postgres', @_); }
sub poll  { return ReplicantTest::poll($node, @_); }

sub fault_point { return ReplicantTest::set_fault_point($node, $_[0]); }

# ---- a rewrite that holds the lock while a chunk starts -----------------------------
# A table per mode, without TOASTable columns, so that ctid is planned
# without a warning; enough rows for dozens of chunks in every mode.
query('CREATE EXTENSION replicant');
foreach my $mode ('keyset', 'ctid', 'bitmap')
{
	query(qq{
CREATE TABLE rw_$mode (id int PRIMARY KEY, n int NOT NULL, m bigint NOT NULL);
INSERT INTO rw_$mode SELECT g, g, g * 7 FROM generate_series(1, 100000) g;
ANALYZE rw_$mode;
CREATE PUBLICATION rw_${mode}_pub FOR TABLE rw_$mode;
});
}

# Rewrites the pipeline's table (named as the pipeline) in a transaction
# that holds its lock until the pipeline's worker waits for it, i.e. until
# a chunk has started (after $meanwhile ran, if given); then commits.
sub rewrite_under_chunk
{
	my ($pipeline, $type, $meanwhile) = @_;
	my $psql = $node->background_psql('postgres');
	$psql->query_safe("BEGIN; ALTER TABLE $pipeline ALTER COLUMN n TYPE $type");
	$meanwhile->() if $meanwhile;
	my $waited = poll(qq{
SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE NOT l.granted AND l.relation = '$pipeline'::regclass
                  AND a.application_name = 'replicant pipeline $pipeline')});
	$psql->query_safe('COMMIT');
	$psql->quit;
	return $waited;
}

# The first rewrite holds the lock while the backfill's first chunk starts
# (planned while the pipeline was disabled, read once it is enabled), the
# second one while a later chunk starts.
foreach my $mode ('keyset', 'ctid', 'bitmap')
{
	my $p    = "rw_$mode";
	my $sink = ReplicantTest::start_sink(name => "sink_$p", delay_ms => 500);
	query("SELECT replicant.create_pipeline('$p', '${p}_pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$mode: the pipeline streams");
	query("SELECT replicant.disable_pipeline('$p')");
	my $id = query("SELECT replicant.backfill('$p', '$p', mode => '$mode')");
	ok(rewrite_under_chunk($p, 'bigint',
			sub { query("SELECT replicant.enable_pipeline('$p')"); }),
		"$mode: rewrite 1 held the table's lock while the first chunk waited for it");
	ok(poll("SELECT rows_done > 0 FROM replicant.backfill_status WHERE id = $id"),
		"$mode: a chunk was delivered after rewrite 1");
	my $state = query("SELECT state FROM replicant.backfill_status WHERE id = $id");
	if ($state eq 'running')
	{
		ok(rewrite_under_chunk($p, 'int'),
			"$mode: rewrite 2 held the table's lock while a later chunk waited for it");
	}
	else
	{
		fail("$mode: the backfill still runs at rewrite 2 (it is $state)");
	}
	$sink->control({ clear => 1 });
	ok(poll("SELECT state <> 'running' FROM replicant.backfill_status WHERE id = $id", 180),
		"$mode: the backfill ends");
	is(query("SELECT state FROM replicant.backfill_status WHERE id = $id"), 'done',
		"$mode: the backfill is done");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [$p], 60),
		"backfill_snapshot_before_lock ($mode): every row arrives across two rewrites");
	query("SELECT replicant.drop_pipeline('$p')");
	$sink->stop;
}

# ---- a table that stops being published during its backfill -------------------------
# Published: even ids, columns id and name.  Never published: odd ids, ssn.
query(q{
CREATE TABLE people (id int PRIMARY KEY, name text NOT NULL, ssn text NOT NULL);
INSERT INTO people SELECT g, 'name ' || g, 'SSN-' || g FROM generate_series(1, 40000) g;
CREATE TABLE other (id int PRIMARY KEY);
INSERT INTO other VALUES (1);
CREATE PUBLICATION people_pub FOR TABLE people (id, name) WHERE (id % 2 = 0);
CREATE PUBLICATION other_pub FOR TABLE other;
CREATE TABLE meas (id int NOT NULL, v int NOT NULL, secret text NOT NULL, PRIMARY KEY (id))
  PARTITION BY RANGE (id);
CREATE TABLE meas_1 PARTITION OF meas FOR VALUES FROM (0) TO (100000);
CREATE TABLE meas_2 PARTITION OF meas FOR VALUES FROM (100000) TO (200000);
INSERT INTO meas SELECT g, g % 10, 'SECRET-' || g FROM generate_series(1, 40000) g;
CREATE PUBLICATION meas_pub FOR TABLE meas (id, v) WHERE (v > 4)
  WITH (publish_via_partition_root = true);
});

# What the sink holds of the table: lines of canonical JSON.
sub leaked
{
	my ($sink, $table, $column, $filter) = @_;
	my @rows = split /\n/, $sink->dump($table);
	return scalar(grep { /"\Q$column\E"/ || !$filter->($_) } @rows);
}

sub even_id
{
	my ($row) = @_;
	return $row =~ /"id":(\d+)/ && $1 % 2 == 0;
}

sub big_v
{
	my ($row) = @_;
	return $row =~ /"v":(\d+)/ && $1 > 4;
}

# Backfills $table of a new pipeline on $pubs into a slowed sink, runs $ddl
# once a chunk was delivered, and checks that nothing unpublished arrived.
sub unpublish_during_backfill
{
	my (%c) = @_;
	my $p    = $c{name};
	my $sink = ReplicantTest::start_sink(name => "sink_$p", delay_ms => 300);
	query(($c{owner} ? "SET ROLE $c{owner}; " : '')
		  . "SELECT replicant.create_pipeline('$p', $c{pubs}, '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$p: the pipeline streams");
	my $id = query("SELECT replicant.backfill('$p', '$c{table}', mode => 'keyset')");
	ok(poll("SELECT rows_done > 0 FROM replicant.backfill_status WHERE id = $id"),
		"$p: a chunk was delivered");
	is(query("SELECT state FROM replicant.backfill_status WHERE id = $id"), 'running',
		"$p: the backfill runs when the table stops being published");
	query($c{ddl});
	$sink->control({ clear => 1 });
	ok(poll("SELECT b.state <> 'running' OR s.state = 'halted'"
			  . " FROM replicant.backfill_status b JOIN replicant.status s USING (pipeline)"
			  . " WHERE b.id = $id", 120),
		"$p: the backfill ends (or the pipeline halts)");
	my ($state, $pipeline_state, $error) = split /\|/,
	  query("SELECT b.state, s.state, s.last_error FROM replicant.backfill_status b"
		  . " JOIN replicant.status s USING (pipeline) WHERE b.id = $id");
	if ($c{may_halt} && $pipeline_state eq 'halted')
	{
		like($error, qr/^publication "\w+" does not exist/, "$p: halted on the missing publication");
		isnt($state, 'done', "$p: the backfill is not recorded as done");
	}
	else
	{
		is($state, 'skipped', "backfill_unpublished_unfiltered ($p): the backfill is skipped");
	}
	is(leaked($sink, $c{delivered_as}, $c{hidden}, $c{filter}), 0,
		"backfill_unpublished_unfiltered ($p): no unpublished row or column reached the sink");
	is($sink->dump($c{leaf_name}), '', "$p: nothing under the detached table's own name")
	  if $c{leaf_name};
	query("SELECT replicant.drop_pipeline('$p')");
	$sink->stop;
}

unpublish_during_backfill(
	name         => 'drop_table',
	pubs         => "'people_pub'",
	table        => 'people',
	ddl          => 'ALTER PUBLICATION people_pub DROP TABLE people',
	delivered_as => 'public.people',
	hidden       => 'ssn',
	filter       => \&even_id);
query('ALTER PUBLICATION people_pub ADD TABLE people (id, name) WHERE (id % 2 = 0)');

# A table no longer published is skipped whatever its owner may still
# read: its SELECT revoked too, it used to halt the pipeline.
query(q{
CREATE ROLE bfowner LOGIN;
GRANT USAGE ON SCHEMA replicant TO bfowner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO bfowner;
GRANT SELECT ON people TO bfowner;
});
unpublish_during_backfill(
	name         => 'drop_and_revoke',
	owner        => 'bfowner',
	pubs         => "'people_pub'",
	table        => 'people',
	ddl          => 'ALTER PUBLICATION people_pub DROP TABLE people; REVOKE SELECT ON people FROM bfowner',
	delivered_as => 'public.people',
	hidden       => 'ssn',
	filter       => \&even_id);
query('ALTER PUBLICATION people_pub ADD TABLE people (id, name) WHERE (id % 2 = 0)');

unpublish_during_backfill(
	name         => 'alter_pipeline',
	pubs         => "'people_pub'",
	table        => 'people',
	ddl          => "SELECT replicant.alter_pipeline('alter_pipeline', publication => ARRAY['other_pub'])",
	delivered_as => 'public.people',
	hidden       => 'ssn',
	filter       => \&even_id);

unpublish_during_backfill(
	name         => 'drop_publication',
	pubs         => "ARRAY['other_pub', 'people_pub']",
	table        => 'people',
	ddl          => 'DROP PUBLICATION people_pub',
	delivered_as => 'public.people',
	hidden       => 'ssn',
	filter       => \&even_id,
	may_halt     => 1);

unpublish_during_backfill(
	name         => 'detach',
	pubs         => "'meas_pub'",
	table        => 'meas_1',
	ddl          => 'ALTER TABLE meas DETACH PARTITION meas_1',
	delivered_as => 'public.meas',
	hidden       => 'secret',
	filter       => \&big_v,
	leaf_name    => 'public.meas_1');

# ---- a table published again after its backfill was skipped -----------------------
# Skipped while no publication published it; published again, it is read
# again from its start: the rows the skipped backfill never read arrive,
# and so does a row changed while the table was not published (the stream
# skipped that change).
query(q{
CREATE TABLE kin (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO kin SELECT g, 'name ' || g FROM generate_series(1, 40000) g;
CREATE PUBLICATION kin_pub FOR TABLE kin;
});
{
	my $sink = ReplicantTest::start_sink(name => 'sink_kin', delay_ms => 300);
	query("SELECT replicant.create_pipeline('kin', 'kin_pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'kin'"),
		'republished: the pipeline streams');
	my $id = query("SELECT replicant.backfill('kin', 'kin', mode => 'keyset')");
	ok(poll("SELECT rows_done > 0 FROM replicant.backfill_status WHERE id = $id"),
		'republished: a chunk was delivered');
	query('ALTER PUBLICATION kin_pub DROP TABLE kin');
	$sink->control({ clear => 1 });
	ok(poll("SELECT state = 'skipped' FROM replicant.backfill_status WHERE id = $id", 120),
		'republished: the backfill is skipped');
	query("UPDATE kin SET name = 'changed while unpublished' WHERE id = 1");
	query('ALTER PUBLICATION kin_pub ADD TABLE kin');
	query("INSERT INTO kin VALUES (0, 'after')");
	my $again = "SELECT state FROM replicant.backfill_status WHERE pipeline = 'kin'"
	  . " AND relation = 'kin'::regclass AND id > $id";
	ok(poll("SELECT EXISTS ($again)", 60), 'republished: the table is backfilled again');
	ok(poll("SELECT ($again) = 'done'", 180), 'republished: the new backfill ends');
	my ($state, $error) = split /\|/,
	  query("SELECT state, coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'kin'");
	is("$state $error", 'streaming ', 'republished: the pipeline streams, with no error');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['kin'], 60),
		'backfill_skipped_republished: every row of the table published again reaches the sink');
	query("SELECT replicant.drop_pipeline('kin')");
	$sink->stop;
}

# ---- a column that leaves the column list while a chunk starts ---------------------
# ALTER PUBLICATION takes a lock that the chunk's does not conflict with.
# Held after it locked its table, before its low watermark, the chunk sees
# b leave the column list and an UPDATE write b's new values, which were
# never published: the chunk must not deliver them (its filter used to be
# taken before its snapshot).
query(q{
CREATE TABLE cl (id int PRIMARY KEY, a int NOT NULL, b text NOT NULL);
INSERT INTO cl SELECT g, g, 'published' FROM generate_series(1, 20000) g;
CREATE PUBLICATION cl_pub FOR TABLE cl (id, a, b);
});
{
	my $sink = ReplicantTest::start_sink(name => 'sink_cl');
	query("SELECT replicant.create_pipeline('cl', 'cl_pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'cl'"),
		'column list: the pipeline streams');
	my $offset = -s $node->logfile;
	fault_point('backfill_chunk:hold');
	my $id = query("SELECT replicant.backfill('cl', 'cl', mode => 'keyset')");
	$node->wait_for_log(qr/fault point "backfill_chunk" reached, holding/, $offset);
	query('ALTER PUBLICATION cl_pub SET TABLE cl (id, a)');
	query("UPDATE cl SET b = 'UNPUBLISHED-' || id");
	fault_point(undef);
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id", 180),
		'column list: the backfill ends');
	ok(poll("SELECT replicant.await_delivered('cl', timeout_ms => 1000)"),
		'column list: the stream delivered the update');
	my @leaked = grep { /UNPUBLISHED-/ } split /\n/, $sink->dump('public.cl');
	is(scalar(@leaked), 0,
		'backfill_filter_before_snapshot: no value written after its column left the column list reaches the sink');
	query("SELECT replicant.drop_pipeline('cl')");
	$sink->stop;
}

# ---- a filter widened between a chunk's snapshot and its filter ------------
# An update committed after the chunk's snapshot, hidden from the stream by
# the row filter (or the publish actions) of that time, drops nothing from
# the chunk; then the publication widens.  Had the chunk read the wider
# filter and the row as of its snapshot, the sink would keep the version
# the update replaced, and the update would never come.  The window is
# held open with the fault point backfill_window:hold (after the chunk's
# snapshot, before it reads its filter).  It used to be held with the
# partition root's lock, which the chunk took only to read its
# publications; it now takes it before the partition's, before its
# snapshot (see "DDL on a partitioned table" below).
foreach my $case (
	[ 'filter_widened', 'WHERE (x > 10)', '' ],
	[ 'actions_widened', '', "WITH (publish = 'insert')" ])
{
	my ($name, $narrow, $actions) = @$case;
	my $widen = $actions ? "SET (publish = 'insert, update')" : "SET TABLE m WHERE (x >= 0)";
	query(qq{
	CREATE TABLE m (id int PRIMARY KEY, x int NOT NULL) PARTITION BY RANGE (id);
	CREATE TABLE m_1 PARTITION OF m FOR VALUES FROM (0) TO (1000000);
	ALTER TABLE m REPLICA IDENTITY FULL;
	ALTER TABLE m_1 REPLICA IDENTITY FULL;
	INSERT INTO m SELECT g, 0 FROM generate_series(1, 10) g;
	INSERT INTO m SELECT g, 100 FROM generate_series(11, 20) g;
	CREATE PUBLICATION mp FOR TABLE m $narrow
	  WITH (publish_via_partition_root = true@{[ $actions ? ", publish = 'insert'" : '' ]});
	});
	my $sink = ReplicantTest::start_sink(name => "sink_$name");
	query("SELECT replicant.create_pipeline('mr', 'mp', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'mr'"), "$name: streams");
	my $offset = -s $node->logfile;
	fault_point('backfill_window:hold');
	my $id = query("SELECT replicant.backfill('mr', 'm_1', mode => 'keyset')");
	$node->wait_for_log(qr/fault point "backfill_window" reached, holding/, $offset);
	query('UPDATE m_1 SET x = 5 WHERE id = 1');
	query("ALTER PUBLICATION mp $widen");
	fault_point(undef);
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id", 120),
		"$name: the backfill ends");
	ok(poll("SELECT replicant.await_delivered('mr', timeout_ms => 1000)"), "$name: delivered");
	my @row1 = grep { /"id":\s*1[,}]/ } split /\n/, $sink->dump('public.m');
	is(scalar(grep { /"x":\s*0[,}]/ } @row1), 0,
		"$name: the sink does not keep the version of id 1 that a committed update replaced");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.m'], 10),
		"$name: the sink holds the source rows under the widened publication");
	query("SELECT replicant.drop_pipeline('mr')");
	query('DROP PUBLICATION mp; DROP TABLE m');
	$sink->stop;
}

# ---- DDL on a partitioned table while a chunk of its partition is held ----------
# ALTER TABLE on a partitioned table locks the root, then its partitions
# (find_all_inheritors: parents before children).  A chunk of a partition
# published via its root used to lock the partition first and its root
# later (replicant_partition_root_open_for_read): held between the two
# (backfill_chunk:hold, the partition's lock taken), the chunk and an
# ALTER TABLE on the root waited for each other, and the deadlock detector
# cancelled one of them (the oracle's "ALTER TYPE during a backfill").  The
# chunk must lock the partition's ancestors, top-down, before it: the ALTER
# then waits for the chunk, and both end.
query(q{
CREATE TABLE pd (id int NOT NULL, region text NOT NULL, v int, PRIMARY KEY (id, region)) PARTITION BY RANGE (id);
CREATE TABLE pd_1 PARTITION OF pd FOR VALUES FROM (0) TO (100000) PARTITION BY LIST (region);
CREATE TABLE pd_1eu PARTITION OF pd_1 FOR VALUES IN ('eu');
CREATE TABLE pd_2 PARTITION OF pd FOR VALUES FROM (100000) TO (200000);
INSERT INTO pd SELECT g, 'eu', g FROM generate_series(1, 3000) g;
INSERT INTO pd SELECT g, 'us', g FROM generate_series(100001, 100100) g;
CREATE PUBLICATION pd_pub FOR TABLE pd WITH (publish_via_partition_root = true);
});
{
	my $sink = ReplicantTest::start_sink(name => 'sink_pd');
	query("SELECT replicant.create_pipeline('pd', 'pd_pub', '$sink->{url}', snapshot => 'none')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'pd'"),
		'partition_ddl: the pipeline streams');
	my $offset = -s $node->logfile;
	fault_point('backfill_chunk:hold');
	my $id = query("SELECT replicant.backfill('pd', 'pd_1eu', mode => 'keyset')");
	$node->wait_for_log(qr/fault point "backfill_chunk" reached, holding/, $offset);
	my $t = $node->background_psql('postgres');
	$t->query_until(qr/altering/, "\\echo altering\nALTER TABLE pd ALTER COLUMN v TYPE bigint;\n");
	ok(poll(q{
	SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	                WHERE NOT l.granted AND a.query LIKE 'ALTER TABLE pd %')}),
		'partition_ddl: the ALTER waits for the held chunk');
	fault_point(undef);
	ok(poll(q{SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE pd %'
	                                                           AND state = 'active')}),
		'partition_ddl: the ALTER ended');
	# A psql whose ALTER failed has exited already.
	eval { $t->quit; 1 };
	is(query(q{SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'pd'::regclass AND attname = 'v'}),
		'bigint', 'partition_ddl: the ALTER TABLE on the root succeeded');
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id", 180),
		'partition_ddl: the backfill ends');
	unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset), qr/deadlock detected/,
		'partition_ddl: no deadlock between the chunk and the ALTER');
	ok(poll("SELECT replicant.await_delivered('pd', timeout_ms => 1000)"), 'partition_ddl: delivered');
	my @rows = grep { length } split /\n/, $sink->dump('public.pd');
	is(scalar(@rows), 3000, 'partition_ddl: every row of the backfilled partition arrives');
	query("SELECT replicant.drop_pipeline('pd')");
	query('DROP PUBLICATION pd_pub; DROP TABLE pd');
	$sink->stop;
}

# ---- an unpublished TRUNCATE after a chunk's snapshot --------------------------
# The publication publishes insert, update and delete, not truncate.  A
# TRUNCATE issued while a chunk holds its snapshot (backfill_window: low
# watermark written, snapshot taken, rows not read) cannot commit before the
# chunk's high watermark: the chunk holds the table's lock from before its
# low watermark until after its high watermark, and TRUNCATE waits for it.
# So the chunk's rows are delivered, in the stream before the TRUNCATE,
# which is not delivered: the sink ends with rows the source no longer has.
# That is the contract (docs/sink-protocol.md, "What both keep": a TRUNCATE
# the publications do not publish leaves the rows at a subscriber and at
# the sink), and what a PostgreSQL subscriber of the same publication does:
# its rows stay after the unpublished TRUNCATE (checked below; its initial
# copy holds the table's lock the same way, so a TRUNCATE waits for it too).
# Had the TRUNCATE been published, it would follow the chunk's rows and
# empty the sink's table (a TRUNCATE inside a chunk's window drops the
# chunk: replicant_chunk_drop_all).
{
	query(q{
	CREATE TABLE tr (id int PRIMARY KEY, v int NOT NULL);
	INSERT INTO tr SELECT g, g FROM generate_series(1, 10) g;
	CREATE PUBLICATION tr_pub FOR TABLE tr WITH (publish = 'insert, update, delete');
	});
	my $sub = ReplicantTest::new_node('tr_subscriber');
	$sub->safe_psql('postgres', 'CREATE TABLE tr (id int PRIMARY KEY, v int NOT NULL)');
	$sub->safe_psql('postgres',
		"CREATE SUBSCRIPTION tr_sub CONNECTION '" . $node->connstr . " dbname=postgres' PUBLICATION tr_pub");
	ok($sub->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')"),
		'unpublished_truncate: the subscriber copied tr');
	my $sink = ReplicantTest::start_sink(name => 'sink_truncate');
	query("SELECT replicant.create_pipeline('tp', 'tr_pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'tp'"),
		'unpublished_truncate: streams');
	my $offset = -s $node->logfile;
	fault_point('backfill_window:hold');
	my $id = query("SELECT replicant.backfill('tp', 'tr', mode => 'keyset')");
	$node->wait_for_log(qr/fault point "backfill_window" reached, holding/, $offset);
	my $t = $node->background_psql('postgres');
	$t->query_until(qr/truncating/, "\\echo truncating\nTRUNCATE tr;\n");
	ok(poll(q{
	SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	                WHERE NOT l.granted AND l.relation = 'tr'::regclass
	                  AND a.query = 'TRUNCATE tr;')}),
		'unpublished_truncate: the TRUNCATE waits for the chunk holding its snapshot');
	fault_point(undef);
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id"),
		'unpublished_truncate: the backfill ends');
	$t->quit;
	is(query('SELECT count(*) FROM tr'), '0', 'unpublished_truncate: the source is empty');
	ok(poll("SELECT replicant.await_delivered('tp', timeout_ms => 1000)"), 'unpublished_truncate: delivered');
	$node->wait_for_catchup('tr_sub');
	is($sub->safe_psql('postgres', 'SELECT count(*) FROM tr'), '10',
		'unpublished_truncate: the subscriber keeps its 10 rows');
	my @rows = grep { length } split /\n/, $sink->dump('public.tr');
	is(scalar(@rows), 10, 'unpublished_truncate: the sink keeps the chunk\'s 10 rows, as the subscriber does');
	query("SELECT replicant.drop_pipeline('tp')");
	$sub->safe_psql('postgres', 'DROP SUBSCRIPTION tr_sub');
	$sub->stop;
	query('DROP PUBLICATION tr_pub; DROP TABLE tr');
	$sink->stop;
}

$node->stop;
done_testing();
