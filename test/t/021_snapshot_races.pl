# Initial snapshots against concurrent DDL:
#
#   ALTER TABLE ... TYPE (a rewrite) while the table is being read: the
#     table is read again in full, never marked done with rows missing
#   a table added to the publication between the snapshot's planning and
#     the slot's creation is snapshotted too
#   row-level security enabled on a table before its snapshot reads it: the
#     pipeline halts, delivering none of its rows (the shard workers read
#     the heap, which would bypass the policies; applying them would deliver
#     a subset as if it were the table)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('snapraces',
	conf => "max_prepared_transactions = 5\nmax_wal_size = 4GB");
$node->safe_psql('postgres', 'CREATE EXTENSION replicant');

sub poll { return ReplicantTest::poll($node, @_); }

# ---- a rewrite during the snapshot -----------------------------------------------
{
	# Several 1024-block windows, so the rewrite lands between two of them.
	$node->safe_psql('postgres', q{
CREATE TABLE big (id int PRIMARY KEY, n int NOT NULL, pad text NOT NULL);
INSERT INTO big SELECT g, g, repeat('x', 100) FROM generate_series(1, 300000) g;
ANALYZE big;
CREATE PUBLICATION big_pub FOR TABLE big;
});
	my $sink = ReplicantTest::start_sink(name => 'sink_rewrite');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('rewrite', 'big_pub', '$sink->{url}',"
		  . " snapshot => 'initial', snapshot_workers => 1)");
	ok(poll("SELECT rows_done > 0 AND state <> 'done' FROM replicant.backfill_status"
			  . " WHERE relation = 'big'::regclass", 120),
		'rewrite: the snapshot is under way');
	$node->safe_psql('postgres', 'ALTER TABLE big ALTER COLUMN n TYPE bigint');
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE relation = 'big'::regclass", 300)
		  || poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'rewrite'", 1),
		'rewrite: the snapshot ends');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['big'], 120),
		'rewrite: every row of the rewritten table reached the sink');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rewrite')");
	$node->safe_psql('postgres', 'DROP TABLE big');
	$sink->stop;
}

# ---- a table added between planning and slot creation ---------------------------
{
	$node->safe_psql('postgres', q{
CREATE TABLE early (id int PRIMARY KEY, v text);
CREATE TABLE late (id int PRIMARY KEY, v text);
INSERT INTO early SELECT g, 'e' FROM generate_series(1, 100) g;
INSERT INTO late SELECT g, 'l' FROM generate_series(1, 100) g;
CREATE PUBLICATION race_pub FOR TABLE early;
});
	# Slot creation waits for this transaction: planning is done by then.
	$node->safe_psql('postgres',
		"BEGIN; INSERT INTO early VALUES (1000, 'held'); PREPARE TRANSACTION 'hold'");
	my $sink = ReplicantTest::start_sink(name => 'sink_race');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('race', 'race_pub', '$sink->{url}', snapshot => 'initial')");
	my $slot = ReplicantTest::slot_name($node, 'postgres', 'race');
	ok(poll("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')"
			  . " AND EXISTS (SELECT 1 FROM replicant.backfill_status WHERE pipeline = 'race')"),
		'planning race: planned, creating the slot');
	$node->safe_psql('postgres', 'ALTER PUBLICATION race_pub ADD TABLE late');
	$node->safe_psql('postgres', "COMMIT PREPARED 'hold'");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'race'", 60),
		'planning race: streaming');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'early', 'late' ], 60),
		'planning race: the table added meanwhile was snapshotted');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('race')");
	$sink->stop;
}

# ---- row-level security enabled before the snapshot reads the table -------------
{
	$node->safe_psql('postgres', q{
CREATE ROLE snapowner LOGIN;
GRANT USAGE ON SCHEMA replicant TO snapowner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO snapowner;
CREATE TABLE secured (id int PRIMARY KEY, v text);
INSERT INTO secured SELECT g, 'SECRETVALUE ' || g FROM generate_series(1, 100) g;
GRANT SELECT ON secured TO snapowner;
CREATE PUBLICATION secured_pub FOR TABLE secured;
});
	# create_pipeline refuses a table the owner cannot read whole: enable
	# row-level security while the slot's creation waits for this one.
	$node->safe_psql('postgres',
		"BEGIN; INSERT INTO early VALUES (1001, 'held'); PREPARE TRANSACTION 'hold_rls'");
	my $sink = ReplicantTest::start_sink(name => 'sink_rls');
	$node->safe_psql('postgres',
		"SET ROLE snapowner; SELECT replicant.create_pipeline('rls', 'secured_pub', '$sink->{url}', snapshot => 'initial')");
	my $slot = ReplicantTest::slot_name($node, 'postgres', 'rls');
	ok(poll("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')"),
		'row-level security: planned, creating the slot');
	$node->safe_psql('postgres', q{
ALTER TABLE secured ENABLE ROW LEVEL SECURITY;
CREATE POLICY evens ON secured FOR SELECT USING (id % 2 = 0);
});
	$node->safe_psql('postgres', "COMMIT PREPARED 'hold_rls'");
	ok(poll("SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = 'rls'", 60),
		'row-level security: the pipeline halts');
	like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'rls'"),
		qr/^table "secured" has row-level security that the pipeline owner does not bypass$/,
		'row-level security: last_error says why');
	is($sink->dump('public.secured'), '', 'row-level security: no row of the table was delivered');
	isnt($node->safe_psql('postgres',
			"SELECT state FROM replicant.backfill_status WHERE relation = 'secured'::regclass"),
		'done', 'row-level security: its snapshot is not recorded as complete');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rls')");
	$sink->stop;
}

# ---- a table that stops being published between two windows ------------------------
# Published: even ids, columns id and name.  Never published: odd ids, ssn.
# Three windows each (some 2,100 blocks).
$node->safe_psql('postgres', q{
CREATE TABLE folk (id int PRIMARY KEY, name text NOT NULL, ssn text NOT NULL);
INSERT INTO folk SELECT g, 'name ' || g, 'SSN-' || g || repeat('s', 60) FROM generate_series(1, 150000) g;
CREATE PUBLICATION folk_pub FOR TABLE folk (id, name) WHERE (id % 2 = 0);
CREATE TABLE bystander (id int PRIMARY KEY);
INSERT INTO bystander VALUES (1);
CREATE PUBLICATION bystander_pub FOR TABLE bystander;
CREATE TABLE parts (id int NOT NULL PRIMARY KEY, v int NOT NULL, secret text NOT NULL)
  PARTITION BY RANGE (id);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (1000000);
CREATE TABLE parts_2 PARTITION OF parts FOR VALUES FROM (1000000) TO (2000000);
INSERT INTO parts SELECT g, g % 10, 'SECRET-' || g || repeat('s', 60) FROM generate_series(1, 150000) g;
CREATE PUBLICATION parts_pub FOR TABLE parts (id, v) WHERE (v > 4)
  WITH (publish_via_partition_root = true);
});
is($node->safe_psql('postgres',
		"SELECT bool_and(pg_relation_size(t) / 8192 > 2048) FROM unnest('{folk,parts_1}'::regclass[]) t"),
	't', 'unpublished: the tables span three snapshot windows');

sub fault_point { return ReplicantTest::set_fault_point($node, $_[0]); }

sub unpublished_rows
{
	my ($sink, $table, $column, $published) = @_;
	return scalar(grep { /"\Q$column\E"/ || !$published->($_) } split /\n/, $sink->dump($table));
}

# Snapshots $table with a pipeline on $pubs, holds the shard worker after
# the table's first window, runs $ddl, and lets the snapshot go on.
sub unpublish_during_snapshot
{
	my (%c) = @_;
	my $p    = $c{name};
	my $sink = ReplicantTest::start_sink(name => "sink_$p");
	my $offset = -s $node->logfile;
	fault_point('snapshot_progress:hold');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$p', $c{pubs}, '$sink->{url}',"
		  . " snapshot => 'initial', snapshot_workers => 1)");
	$node->wait_for_log(qr/fault point "snapshot_progress" reached, holding/, $offset);
	my $state = "SELECT state FROM replicant.backfill_status WHERE pipeline = '$p'"
	  . " AND relation = '$c{table}'::regclass";
	is($node->safe_psql('postgres', $state), 'running',
		"$p: one window of $c{table} is read when it stops being published");
	ref $c{ddl} ? $c{ddl}->() : $node->safe_psql('postgres', $c{ddl});
	fault_point(undef);
	ok(poll("SELECT ($state) NOT IN ('planned', 'running')"
			  . " OR (SELECT state = 'halted' FROM replicant.status WHERE pipeline = '$p')", 180),
		"$p: the table's snapshot ends (or the pipeline halts)");
	my ($table_state, $pipeline_state, $error) = split /\|/, $node->safe_psql('postgres',
		"SELECT ($state), state, last_error FROM replicant.status WHERE pipeline = '$p'");
	if ($c{may_halt} && $pipeline_state eq 'halted')
	{
		like($error, qr/^publication "\w+" does not exist/, "$p: halted on the missing publication");
		isnt($table_state, 'done', "$p: the table's snapshot is not recorded as done");
	}
	else
	{
		is($table_state, 'skipped', "snapshot_unpublished_unfiltered ($p): backfill_status says skipped");
	}
	is(unpublished_rows($sink, $c{delivered_as}, $c{hidden}, $c{published}), 0,
		"snapshot_unpublished_unfiltered ($p): no unpublished row or column reached the sink");
	is($sink->dump($c{leaf_name}), '', "$p: nothing under the detached table's own name")
	  if $c{leaf_name};
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('$p')");
	$sink->stop;
}

my $even_id = sub { $_[0] =~ /"id":(\d+)/ && $1 % 2 == 0 };
unpublish_during_snapshot(
	name         => 'snap_drop_table',
	pubs         => "'folk_pub'",
	table        => 'folk',
	ddl          => 'ALTER PUBLICATION folk_pub DROP TABLE folk',
	delivered_as => 'public.folk',
	hidden       => 'ssn',
	published    => $even_id);
$node->safe_psql('postgres', 'ALTER PUBLICATION folk_pub ADD TABLE folk (id, name) WHERE (id % 2 = 0)');

unpublish_during_snapshot(
	name         => 'snap_alter_pipeline',
	pubs         => "'folk_pub'",
	table        => 'folk',
	ddl          => "SELECT replicant.alter_pipeline('snap_alter_pipeline', publication => ARRAY['bystander_pub'])",
	delivered_as => 'public.folk',
	hidden       => 'ssn',
	published    => $even_id);

unpublish_during_snapshot(
	name         => 'snap_drop_publication',
	pubs         => "ARRAY['folk_pub', 'bystander_pub']",
	table        => 'folk',
	ddl          => 'DROP PUBLICATION folk_pub',
	delivered_as => 'public.folk',
	hidden       => 'ssn',
	published    => $even_id,
	may_halt     => 1);

# DETACH PARTITION cannot come between two windows: it waits for the
# snapshot's end, since the exporting transaction holds a lock on the root
# (it listed the published tables).  A leaf stops being published through
# its root when the publication drops the root.
unpublish_during_snapshot(
	name         => 'snap_detach',
	pubs         => "'parts_pub'",
	table        => 'parts_1',
	ddl          => sub {
		my ($ret, $out, $err) = $node->psql('postgres',
			"SET lock_timeout = '2s'; ALTER TABLE parts DETACH PARTITION parts_1");
		like($err, qr/canceling statement due to lock timeout/,
			'snap_detach: DETACH PARTITION waits for the snapshot');
		$node->safe_psql('postgres', 'ALTER PUBLICATION parts_pub DROP TABLE parts');
	},
	delivered_as => 'public.parts',
	hidden       => 'secret',
	published    => sub { $_[0] =~ /"v":(\d+)/ && $1 > 4 },
	leaf_name    => 'public.parts_1');

# ---- a table published again after its snapshot was skipped ------------------------
# The rest of its snapshot is skipped while no publication publishes it;
# published again (ALTER PUBLICATION ... ADD TABLE, or the publication
# created again), it is backfilled from its start, so every row arrives.
# It used to stay skipped, with nothing in replicant.status: the rows the
# snapshot had not read were lost while the table was published.
$node->safe_psql('postgres', q{
CREATE TABLE kin (id int PRIMARY KEY, name text NOT NULL, pad text NOT NULL);
INSERT INTO kin SELECT g, 'name ' || g, repeat('p', 400) FROM generate_series(1, 25000) g;
CREATE PUBLICATION kin_pub FOR TABLE kin;
});
is($node->safe_psql('postgres', "SELECT pg_relation_size('kin') / 8192 > 1024"), 't',
	'republished: kin spans two snapshot windows');
foreach my $case ('republished', 'recreated')
{
	my $p    = "snap_$case";
	my $sink = ReplicantTest::start_sink(name => "sink_$p");
	my $offset = -s $node->logfile;
	fault_point('snapshot_progress:hold');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$p', 'kin_pub', '$sink->{url}',"
		  . " snapshot => 'initial', snapshot_workers => 1)");
	$node->wait_for_log(qr/fault point "snapshot_progress" reached, holding/, $offset);
	$node->safe_psql('postgres',
		$case eq 'republished' ? 'ALTER PUBLICATION kin_pub DROP TABLE kin' : 'DROP PUBLICATION kin_pub');
	fault_point(undef);
	my $skipped = "SELECT id FROM replicant.backfill_status WHERE pipeline = '$p' AND state = 'skipped'";
	ok(poll("SELECT EXISTS ($skipped)", 120), "$case: the rest of kin's snapshot is skipped");
	$node->safe_psql('postgres',
		$case eq 'republished' ? 'ALTER PUBLICATION kin_pub ADD TABLE kin' : 'CREATE PUBLICATION kin_pub FOR TABLE kin');
	$node->safe_psql('postgres', "UPDATE kin SET name = 'after' WHERE id = 1");
	# The stream may halt on the publication missing between the DROP and
	# the CREATE; the operator, who created it again already, resumes.
	ok(poll("SELECT CASE WHEN state = 'halted' THEN true"
			  . " ELSE replicant.await_delivered('$p', timeout_ms => 1000) END"
			  . " FROM replicant.status WHERE pipeline = '$p'", 120),
		"$case: the stream reached the change after (or halted)");
	if ($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = '$p'") eq 'halted')
	{
		like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = '$p'"),
			qr/^publication "kin_pub" does not exist/, "$case: halted on the missing publication");
		$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('$p')");
	}
	my $again = "SELECT state FROM replicant.backfill_status WHERE pipeline = '$p'"
	  . " AND relation = 'kin'::regclass AND id > ($skipped)";
	ok(poll("SELECT EXISTS ($again)", 60), "$case: kin is backfilled again");
	ok(poll("SELECT ($again) = 'done'", 180), "$case: the backfill ends");
	my ($state, $error) = split /\|/, $node->safe_psql('postgres',
		"SELECT state, coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$p'");
	is("$state $error", 'streaming ', "$case: the pipeline streams, with no error");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['kin'], 60),
		"snapshot_skipped_republished ($case): every row of the table published again reaches the sink");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('$p')");
	$sink->stop;
}

$node->stop;
done_testing();
