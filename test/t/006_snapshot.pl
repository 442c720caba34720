# Initial snapshots (docs/internals.md §3): create_pipeline(snapshot =>
# 'initial') reads the published tables under the slot's exported snapshot
# with parallel shard workers, brackets each table with first/last markers
# and then streams from the slot's consistent point.  Covered: a 200,000-row
# table under a concurrent pgbench (sink equals source, untouched rows
# delivered exactly once, marker order, progress views and states); a shard
# worker killed with SIGKILL and an immediate server stop mid-snapshot
# (resume under a fresh snapshot, done windows not read again, writes made
# during the snapshot delivered); VACUUM FULL during the snapshot (the table
# starts over); a key-less table, a partitioned table (leaves under their
# own names; under the root's when published via the root) and a type zoo whose snapshot reads and stream inserts encode
# to byte-identical JSON; a sink that refuses a third of the requests (every
# row still exactly once, each batch retried in its place).
#
# versions: all (the exported snapshot of a new slot; publish_via_partition_root)
use strict;
use warnings;
use IPC::Run;
use Encode ();
use JSON::PP;
use List::Util qw(first max min sum0);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $started = time();
my $node = ReplicantTest::new_node('snapshot',
	conf => "restart_after_crash = on\nmax_wal_size = 4GB\nshared_buffers = 256MB");

$node->safe_psql('postgres', 'CREATE EXTENSION replicant');

# ---- helpers ----------------------------------------------------------------

sub query { return $node->safe_psql('postgres', @_); }

sub lines { my ($text) = @_; return scalar($text =~ tr/\n//); }

sub state_of
{
	my ($pipeline) = @_;
	return query("SELECT state FROM replicant.status WHERE pipeline = '$pipeline'");
}

# Waits until the pipeline shows the state; on timeout shows its last error.
sub wait_state
{
	my ($pipeline, $state, $name) = @_;
	my $ok = $node->poll_query_until('postgres',
		"SELECT state FROM replicant.status WHERE pipeline = '$pipeline'", $state);
	diag("last_error: "
		  . query("SELECT coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$pipeline'"))
	  unless $ok;
	ok($ok, $name);
	return $ok;
}

# Waits for a log line after $offset; returns true if it came.
sub log_line_after
{
	my ($regexp, $offset) = @_;
	return defined eval { $node->wait_for_log($regexp, $offset) };
}

# A table of $rows rows that fillfactor 10 and a 420-byte pad spread one
# row per block, so that a few thousand rows make several 1024-block shards,
# and a slow sink makes the snapshot last seconds.
# The pad is stored PLAIN: no update can leave it as unchanged TOAST, so a
# resumed snapshot goes on where it stopped (025 has a table that cannot).
sub create_padded_table
{
	my ($table, $rows) = @_;
	query(qq{
		CREATE TABLE $table (id bigint PRIMARY KEY, v int NOT NULL, pad text)
		  WITH (fillfactor = 10, autovacuum_enabled = off);
		ALTER TABLE $table ALTER COLUMN pad SET STORAGE PLAIN;
		INSERT INTO $table SELECT g, g, repeat(md5(g::text), 14) FROM generate_series(1, $rows) g;
		ANALYZE $table;
	});
	return;
}

# The blocks of the pipeline's snapshot shards recorded as delivered, for
# one table: a list of [lo, next_block).
sub delivered_windows
{
	my ($pipeline, $table) = @_;
	my $out = query(qq{
		SELECT s.lo_block, s.next_block
		  FROM replicant.snapshot_shards s
		  JOIN replicant.backfills b ON b.id = s.backfill_id
		  JOIN replicant.pipelines p ON p.id = b.pipeline_id
		 WHERE p.name = '$pipeline' AND b.relid = '$table'::regclass
		   AND s.next_block > s.lo_block});
	return [ map { [ split /\|/ ] } grep { length } split /\n/, $out ];
}

# id => heap block of every row of the table.
sub blocks_of
{
	my ($table) = @_;
	my $out = query("SELECT id, (ctid::text::point)[0]::bigint FROM $table");
	return { map { split /\|/ } split /\n/, $out };
}

# Rows of $table whose block lies in one of the windows, minus @$exclude.
sub ids_in_windows
{
	my ($blocks, $windows, $exclude) = @_;
	my %skip = map { $_ => 1 } @$exclude;
	return [
		grep {
			my $b = $blocks->{$_};
			!$skip{$_} && grep { $b >= $_->[0] && $b < $_->[1] } @$windows
		} keys %$blocks
	];
}

# Checks that the sink applied exactly $times inserts, updates or reads to
# each of the ids (of a bigint key "id"); shows a few offenders if not.
sub delivered_times
{
	my ($counts, $ids, $times, $name) = @_;
	my @wrong = grep { ($counts->{qq({"id":$_})} // 0) != $times } @$ids;
	is(scalar @wrong, 0, $name)
	  or diag(scalar(@wrong) . ' rows, e.g. id x deliveries: '
		  . join(', ', map { "$_ x" . ($counts->{qq({"id":$_})} // 0) } @wrong[ 0 .. min(9, $#wrong) ]));
	return;
}

sub backfill_row
{
	my ($pipeline, $table, $columns) = @_;
	return query("SELECT $columns FROM replicant.backfill_status"
		  . " WHERE pipeline = '$pipeline' AND relation = '$table'::regclass");
}

# The accepted requests concerning schema.table, in arrival order:
# (first markers, last markers, read batches, stream batches) as indexes.
sub requests_for
{
	my ($sink, $table) = @_;
	my ($schema, $name) = split /\./, $table;
	my @acc = @{ $sink->stats->{accepted} };
	my (@first, @last, @reads, @stream, %backfill_ids);
	for my $i (0 .. $#acc)
	{
		my $r = $acc[$i];
		if ($r->{kind} eq 'snapshot')
		{
			my $s = $r->{snapshot};
			next unless $s->{schema} eq $schema && $s->{table} eq $name;
			$backfill_ids{ $s->{backfill_id} } = 1;
			push @first, $i if $s->{first};
			push @last,  $i if $s->{last};
			push @reads, $i if $r->{changes} > 0;
		}
		elsif ($r->{kind} eq 'changes' && grep { $_ eq $table } @{ $r->{tables} })
		{
			push @stream, $i;
		}
	}
	return {
		first => \@first,
		last => \@last,
		reads => \@reads,
		stream => \@stream,
		backfill_ids => [ sort keys %backfill_ids ],
		read_changes => sum0(map { $acc[$_]{changes} } @reads),
	};
}

# Exactly one first and one last marker, first before every read, last
# after every read, stream batches of the table only after the last marker.
sub markers_ok
{
	my ($sink, $table, $what) = @_;
	my $r = requests_for($sink, $table);
	is(scalar @{ $r->{first} }, 1, "$what: exactly one first:true batch");
	is(scalar @{ $r->{last} },  1, "$what: exactly one last:true batch");
	ok(@{ $r->{reads} } && $r->{first}[0] < min(@{ $r->{reads} }),
		"$what: the first marker precedes every read");
	ok(@{ $r->{reads} } && $r->{last}[0] > max(@{ $r->{reads} }),
		"$what: the last marker follows every read");
	ok(!@{ $r->{stream} } || min(@{ $r->{stream} }) > $r->{last}[0],
		"$what: stream batches of the table come after its last marker");
	return $r;
}

# The pid of one running shard worker of the pipeline, or ''.
sub shard_worker_pid
{
	my ($pipeline) = @_;
	return query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'replicant snapshot'"
		  . " AND application_name = 'replicant snapshot $pipeline' ORDER BY pid LIMIT 1");
}

# Waits until the table's snapshot has recorded progress but is not done.
# Waits until the snapshot of $table has recorded a window's progress (not
# only acknowledged batches of the window it reads, which backfill_status
# counts too) and is still running.
sub wait_mid_snapshot
{
	my ($pipeline, $table, $what) = @_;
	ok( $node->poll_query_until('postgres', qq{
			SELECT bool_or(s.next_block > s.lo_block) AND bool_and(b.state = 'running')
			  FROM replicant.snapshot_shards s
			  JOIN replicant.backfills b ON b.id = s.backfill_id
			  JOIN replicant.pipelines p ON p.id = b.pipeline_id
			 WHERE p.name = '$pipeline' AND b.relid = '$table'::regclass}),
		"$what: the snapshot of $table is under way");
	return;
}

# ---- 1. 200,000 rows, two shard workers, a concurrent pgbench ----------------

# The sinks that count deliveries drop a request whose webhook-id they
# applied (dedup_ids): on a loaded machine a request can outlast
# http_timeout_ms, and its retry (same id, same bytes) is at-least-once as
# designed.  A row read twice travels in requests of different ids, and
# still counts twice.
my $sink1 = ReplicantTest::start_sink(name => 'sink_big', dedup_ids => 1);
query(q{
CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL, v text, ts timestamptz,
                  amount numeric(14,4), doc jsonb) WITH (fillfactor = 30);
INSERT INTO big
SELECT g, g % 1000, md5(g::text) || repeat('x', g % 40),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
       (g * 1.2345)::numeric(14,4),
       jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g % 7), 'f', g / 8.0)
  FROM generate_series(1, 200000) g;
ANALYZE big;
-- what pgbench touched, unpublished
CREATE TABLE touched (id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE SEQUENCE big_new START 1000001;
CREATE TABLE marker1 (id serial PRIMARY KEY);
CREATE PUBLICATION pub_big FOR TABLE big, marker1;
});
my $big_blocks = query("SELECT pg_relation_size('big') / 8192");
cmp_ok($big_blocks, '>', 1024, "premise: big ($big_blocks blocks) makes at least two shards");

# Each transaction updates a random existing row (recorded in touched) and
# inserts a new one, which is never updated.
my $script = PostgreSQL::Test::Utils::tempdir() . '/touch.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{\set id random(1, 200000)
BEGIN;
UPDATE big SET n = n + 1, doc = doc || '{"u": true}', ts = clock_timestamp() WHERE id = :id;
INSERT INTO touched (id) VALUES (:id);
INSERT INTO big VALUES (nextval('big_new'), -1, 'inserted', clock_timestamp(), 0.5, '{"new": 1}');
COMMIT;
});

query("SELECT replicant.create_pipeline('p_big', 'pub_big', '$sink1->{url}',"
	  . " snapshot => 'initial', snapshot_workers => 2)");
my ($pgbench_out, $pgbench_err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '2', '-T', '300', '-R', '100', '-f', $script,
		'-h', $node->host, '-p', $node->port, 'postgres'
	],
	'>', \$pgbench_out, '2>', \$pgbench_err);

wait_state('p_big', 'snapshotting', 'state is snapshotting while the snapshot runs');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'replicant snapshot'"
		  . " AND application_name = 'replicant snapshot p_big'", '2'),
	'two shard workers run, named in pg_stat_activity');
wait_state('p_big', 'streaming', 'state is streaming once the snapshot is done');

# Let pgbench go on into the stream, then stop it (a transaction cut off
# rolls back whole, touched row included).
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) >= 30 FROM touched
		 WHERE at > (SELECT finished_at FROM replicant.backfill_status WHERE relation = 'big'::regclass)}),
	'pgbench goes on after the snapshot');
$pgbench->kill_kill(grace => 5);
my $overlap = query(q{
	SELECT count(*) FROM touched t, replicant.backfill_status b
	 WHERE b.relation = 'big'::regclass AND t.at BETWEEN b.started_at AND b.finished_at});
cmp_ok($overlap, '>', 0, "pgbench updated rows while the snapshot ran ($overlap)");

query('INSERT INTO marker1 DEFAULT VALUES');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink1, ['marker1']),
	'stream caught up after the snapshot');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink1, ['big']),
	'sink equals source for the 200,000-row table snapshotted under pgbench');

{
	my $counts = $sink1->deliveries('public.big');
	my %touched = map { $_ => 1 } split /\n/, query('SELECT DISTINCT id FROM touched');
	my @untouched = grep { !$touched{$_} } 1 .. 200000;
	my @new = split /\n/, query('SELECT id FROM big WHERE id > 200000');
	cmp_ok(scalar @untouched, '>', 150000,
		sprintf('premise: %d original rows never updated, %d touched, %d inserted',
			scalar @untouched, scalar keys %touched, scalar @new));
	delivered_times($counts, \@untouched, 1,
		'every never-updated original row was delivered exactly once');
	delivered_times($counts, \@new, 1,
		'every row inserted around the snapshot point was delivered exactly once');
}

{
	my $r = markers_ok($sink1, 'public.big', 'big');
	cmp_ok(scalar @{ $r->{stream} }, '>', 0, 'big: stream batches arrived after the snapshot');
	is_deeply($r->{backfill_ids}, [ backfill_row('p_big', 'big', 'id') ],
		'big: snapshot batches carry the backfill id of backfill_status');
	is(backfill_row('p_big', 'big', 'rows_done'), $r->{read_changes},
		"rows_done equals the reads delivered ($r->{read_changes})");
	my $m = requests_for($sink1, 'public.marker1');
	is(join(',', scalar @{ $m->{first} }, scalar @{ $m->{last} }, scalar @{ $m->{reads} }),
		'1,1,0', 'an empty table gets its first and last markers and no reads');
	ok($m->{first}[0] < $m->{last}[0], 'empty table: first marker before last marker');
}

is( backfill_row('p_big', 'big',
		"mode, state, rows_done >= 200000, percent = 100, started_at IS NOT NULL,"
		  . " finished_at IS NOT NULL, finished_at >= started_at"),
	'ctid|done|t|t|t|t|t',
	'backfill_status: ctid, done, rows_done >= 200000, 100 percent, started and finished');
is(query("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'replicant snapshot'"),
	'0', 'no shard worker left after the snapshot');
is(state_of('p_big'), 'streaming', 'p_big streams');
query("SELECT replicant.drop_pipeline('p_big')");
query('DROP TABLE big, touched');

# ---- 2 and 3. a crash mid-snapshot ----------------------------------------

# Runs a snapshot of a padded table through a slow sink, writes to it
# mid-snapshot (also to rows of windows already delivered, which only the
# stream can bring), crashes the server with $crash, and checks the resume.
sub crash_mid_snapshot
{
	my ($what, $pipeline, $table, $crash) = @_;
	my $sink = ReplicantTest::start_sink(name => "sink_$what", delay_ms => 200, dedup_ids => 1);
	create_padded_table($table, 12000);
	query("CREATE PUBLICATION pub_$what FOR TABLE $table");
	my $blocks = blocks_of($table);
	query("SELECT replicant.create_pipeline('$pipeline', 'pub_$what', '$sink->{url}',"
		  . " snapshot => 'initial', snapshot_workers => 2, batch_max_bytes => 65536)");
	wait_mid_snapshot($pipeline, $table, $what);
	is( backfill_row($pipeline, $table,
			'state, percent > 0 AND percent < 100, started_at IS NOT NULL, finished_at IS NULL'),
		'running|t|t|t', "$what: backfill_status shows the snapshot running, partly done");

	# Windows recorded now are delivered for good: resuming must not read
	# them again, and changes to their rows can only come from the stream.
	my $windows = delivered_windows($pipeline, $table);
	my @done = sort { $a <=> $b } @{ ids_in_windows($blocks, $windows, []) };
	cmp_ok(scalar @done, '>', 100,
		sprintf('%s: premise: %d rows in windows recorded before the crash', $what, scalar @done));
	my @updated = @done[ 0 .. 19 ];
	my @deleted = @done[ 20 .. 29 ];
	my @far = (11001 .. 11020);    # in a shard near the end
	query(sprintf(q{
		UPDATE %1$s SET v = -v, pad = 'updated during' WHERE id IN (%2$s);
		DELETE FROM %1$s WHERE id IN (%3$s);
		UPDATE %1$s SET v = -v WHERE id IN (%4$s);
		INSERT INTO %1$s SELECT g, g, 'during' FROM generate_series(20001, 20050) g;},
		$table, join(',', @updated), join(',', @deleted), join(',', @far)));

	my $log_offset = -s $node->logfile;
	$crash->();
	ok(log_line_after(qr/pipeline "$pipeline" resumes its initial snapshot/, $log_offset),
		"$what: the pipeline resumes its initial snapshot");
	$sink->control({ delay_ms => 0 });
	query(qq{
		INSERT INTO $table SELECT g, g, 'after the crash' FROM generate_series(20051, 20060) g;
		DELETE FROM $table WHERE id BETWEEN 20001 AND 20005;
	});
	wait_state($pipeline, 'streaming', "$what: the snapshot finishes and the pipeline streams");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [$table]),
		"$what: sink equals source");

	my $counts = $sink->deliveries("public.$table");
	is(scalar(grep { exists $counts->{qq({"id":$_})} } 20006 .. 20060), 55,
		"$what: rows inserted during the snapshot and after the crash were delivered");
	is(scalar(grep { exists $counts->{qq({"id":$_})} } @deleted, 20001 .. 20005), 0,
		"$what: rows deleted during the snapshot are gone from the sink");
	delivered_times($counts, \@updated, 2,
		"$what: rows of delivered windows updated mid-snapshot: one read, one stream update");
	delivered_times($counts, ids_in_windows($blocks, $windows, [ @updated, @deleted ]), 1,
		"$what: windows delivered before the crash were not read again");
	is(backfill_row($pipeline, $table, 'state, percent = 100, finished_at IS NOT NULL'),
		'done|t|t', "$what: backfill done");
	markers_ok($sink, "public.$table", $what);
	query("SELECT replicant.drop_pipeline('$pipeline')");
	query("DROP TABLE $table");
	return;
}

# 2. SIGKILL of a shard worker: the postmaster restarts the server.
crash_mid_snapshot('kill', 'p_kill', 't_kill',
	sub {
		my $pid = shard_worker_pid('p_kill');
		isnt($pid, '', 'kill: a shard worker runs mid-snapshot');
		kill 'KILL', $pid;
	});

# 3. An immediate stop and a start.
crash_mid_snapshot('stop', 'p_stop', 't_stop',
	sub {
		$node->stop('immediate');
		$node->start;
	});

# ---- 4. VACUUM FULL during the snapshot -------------------------------------

my $sink4 = ReplicantTest::start_sink(name => 'sink_vacuum', delay_ms => 200, dedup_ids => 1);
create_padded_table('t_vf', 12000);
# Every third row gone: the rewrite moves the others to lower blocks.
query('DELETE FROM t_vf WHERE id % 3 = 0; CREATE PUBLICATION pub_vf FOR TABLE t_vf');
my $visible = query('SELECT count(*) FROM t_vf');
my $filenode = query("SELECT pg_relation_filenode('t_vf')");
query("SELECT replicant.create_pipeline('p_vf', 'pub_vf', '$sink4->{url}',"
	  . " snapshot => 'initial', snapshot_workers => 2, batch_max_bytes => 65536)");
wait_mid_snapshot('p_vf', 't_vf', 'vacuum full');
# Versions the snapshot sees must survive the rewrite.
query('UPDATE t_vf SET v = -v WHERE id BETWEEN 1 AND 30; DELETE FROM t_vf WHERE id BETWEEN 31 AND 60');
my $before = blocks_of('t_vf');
my $log_offset = -s $node->logfile;
query('VACUUM FULL t_vf');
isnt(query("SELECT pg_relation_filenode('t_vf')"), $filenode, 'premise: VACUUM FULL rewrote t_vf');
{
	my $after = blocks_of('t_vf');
	my $moved = grep { defined $after->{$_} && $after->{$_} != $before->{$_} } keys %$before;
	cmp_ok($moved, '>', 1000, "premise: the rewrite moved rows to other blocks ($moved)");
}
is(query("SELECT state FROM replicant.backfill_status WHERE relation = 't_vf'::regclass"),
	'running', 'premise: the rewrite happened mid-snapshot');
ok(log_line_after(qr/table "t_vf" was rewritten during the snapshot; reading it again/, $log_offset),
	'the rewritten table is read again');
$sink4->control({ delay_ms => 0 });
wait_state('p_vf', 'streaming', 'rewritten table: snapshot finishes and streams');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink4, ['t_vf']),
	'rewritten table: sink equals source');
is(backfill_row('p_vf', 't_vf', 'state, rows_done'), "done|$visible",
	"rewritten table: rows_done counts the rows of the snapshot once ($visible)");
markers_ok($sink4, 'public.t_vf', 'rewritten table');
query("SELECT replicant.drop_pipeline('p_vf')");
query('DROP TABLE t_vf');

# ---- 5. key-less, partitioned and type-zoo tables ---------------------------

my $sink5 = ReplicantTest::start_sink(name => 'sink_shapes', keep_bodies => 1);
query(q{
CREATE TABLE t_nokey (a int, b text);
INSERT INTO t_nokey VALUES (1, 'x'), (1, 'x'), (2, NULL), (NULL, NULL);

CREATE TABLE parted (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100);
CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (200) PARTITION BY RANGE (id);
CREATE TABLE parted_2a PARTITION OF parted_2 FOR VALUES FROM (100) TO (150);
CREATE TABLE parted_2b PARTITION OF parted_2 FOR VALUES FROM (150) TO (200);
CREATE TABLE parted_def PARTITION OF parted DEFAULT;
INSERT INTO parted SELECT g, 'p' || g FROM generate_series(0, 260, 5) g;

CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE pair AS (x int, label text, m mood);
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN email AS text;
CREATE TABLE t_types (
  id int PRIMARY KEY,
  gone int,
  ints int[], grid int[], texts text[],
  comp pair, comps pair[],
  m mood, d posint, dd email,
  j jsonb, js json,
  n numeric, n_big numeric, n_scale numeric(12,4),
  f8 float8, f4 real,
  ts timestamptz, tsn timestamp, dt date, tm time, tmtz timetz,
  b bytea, u uuid, iv interval, r int4range, mr int4multirange,
  bo bool, bits varbit, addr inet, mac macaddr, cash money,
  txt text, big text,
  gen int GENERATED ALWAYS AS (d * 2) STORED);
ALTER TABLE t_types DROP COLUMN gone;
INSERT INTO t_types VALUES
 (1, '{1,2,NULL,4}', '{{1,2},{3,4}}', '{"a b","c\"d",NULL,"{}"}',
  ROW(1, 'x y', 'ok')::pair, ARRAY[ROW(1, 'a', 'sad'), ROW(2, NULL, 'happy')]::pair[],
  'happy', 7, 'a@b.c',
  '{"b": [1, 2.50, {"c": null}], "a": "\u00e9"}', '{"z": 1,  "a" : [true, 1.0]}',
  'NaN', 123456789012345678901234567890.000000001, 1.5,
  0.1, 3.14, '2024-02-29 23:59:59.123456+05:30', '2024-02-29 23:59:59.5', '2024-02-29',
  '23:59:59.999999', '12:00+02', '\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '1 year 2 mons 3 days 04:05:06.789', '[1,10)', '{[1,3),[5,7)}',
  true, B'1011', '192.168.0.1/24', '08:00:2b:01:02:03', 12.34,
  E'tab\there "quote" \\\\ back \u2028 é 😀 \u0001', NULL),
 (3, '[0:2]={7,8,9}', '{}', '{}', ROW(NULL, NULL, NULL)::pair, '{}', 'sad', 1, '',
  'null', '[]', 'Infinity', '-Infinity', -0.0001,
  'NaN', '-0', 'infinity', '-infinity', '-infinity', '00:00', '00:00:00+00', '\x',
  '00000000-0000-0000-0000-000000000000', '-1 days +00:00:00.000001', 'empty', '{}',
  false, B'', '::1', 'ff:ff:ff:ff:ff:ff', -0.01, '', NULL);
INSERT INTO t_types (id) VALUES (2);   -- every other column NULL
UPDATE t_types SET big = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g)
 WHERE id = 1;

CREATE PUBLICATION pub_shapes FOR TABLE t_nokey, parted, t_types;
});
is( query("SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class WHERE oid = 't_types'::regclass"),
	't', 'premise: t_types.big is TOASTed out of line');

query("SELECT replicant.create_pipeline('p_shapes', 'pub_shapes', '$sink5->{url}',"
	  . " snapshot => 'initial', snapshot_workers => 3)");
wait_state('p_shapes', 'streaming', 'shapes: snapshot done, streaming');

# Stream copies of the snapshotted type rows, keys + 100, and more rows.
my $columns = query(q{
	SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
	 WHERE attrelid = 't_types'::regclass AND attnum > 1 AND NOT attisdropped AND attgenerated = ''});
query("INSERT INTO t_types (id, $columns) SELECT id + 100, $columns FROM t_types WHERE id IN (1, 2, 3)");
query(q{INSERT INTO t_nokey VALUES (1, 'x'); INSERT INTO parted VALUES (7, 'p7'), (177, 'p177'), (999, 'p999')});

my @leaves = qw(parted_1 parted_2a parted_2b parted_def);
# The generated column is not published (pgoutput: never before 18, and
# 18's default publish_generated_columns = none).
my $published_types = ReplicantTest::source_rows($node, 'postgres', "(SELECT id, $columns FROM t_types)");
my $types_deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
usleep(200_000)
  while $sink5->dump('public.t_types') ne $published_types && time() < $types_deadline;
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink5, [ 't_nokey', @leaves ])
	  && $sink5->dump('public.t_types') eq $published_types,
	'shapes: key-less table, partition leaves and type zoo equal the source');

# The key-less table: reads with key null, every row (duplicates too) once.
{
	my @bodies = map { $_->{body} } @{ $sink5->bodies };
	my @reads = map { @{ $_->{changes} } }
	  grep { $_->{kind} eq 'snapshot' && $_->{snapshot}{table} eq 't_nokey' } @bodies;
	is(scalar @reads, 4, 'key-less table: four reads for four rows');
	is(scalar(grep { $_->{op} eq 'read' && exists $_->{key} && !defined $_->{key} } @reads), 4,
		'key-less table: every read has "key": null');
	is(lines($sink5->dump('public.t_nokey')), 5, 'key-less table: duplicate rows kept as a bag');

	# The snapshot batch shape.
	my $b = first { $_->{kind} eq 'snapshot' && @{ $_->{changes} } } @bodies;
	is(join(',', sort keys %$b), 'changes,kind,pipeline,snapshot', 'snapshot batch: top-level members');
	is(join(',', sort keys %{ $b->{snapshot} }), 'backfill_id,first,last,schema,table',
		'snapshot batch: "snapshot" members');
	ok(JSON::PP::is_bool($b->{snapshot}{first}) && JSON::PP::is_bool($b->{snapshot}{last}),
		'snapshot batch: first and last are JSON booleans');
	is(join(',', sort keys %{ $b->{changes}[0] }), 'key,new,op,schema,table', 'read change: members');

	# Partitions: read and streamed under the leaves' names only.
	my %tables = map { ($_->{snapshot}{table} // '') => 1 } grep { $_->{kind} eq 'snapshot' } @bodies;
	is(join(',', sort grep { /^parted/ } keys %tables), join(',', @leaves),
		'partitioned table: snapshot batches name the leaf partitions');
	my @stored = sort keys %{ { map { (split / /)[0] => 1 } split /\n/, $sink5->dump } };
	is(join(',', @stored),
		join(',', map { "public.$_" } sort(@leaves, 't_nokey', 't_types')),
		'partitioned table: rows stored under leaf names, none under parted or parted_2');
	is( query(q{SELECT string_agg(relation::text, ',' ORDER BY relation::text) FROM replicant.backfill_status
			  WHERE pipeline = 'p_shapes' AND relation::text LIKE 'parted%'}),
		join(',', @leaves), 'partitioned table: one backfill per leaf');
	markers_ok($sink5, "public.$_", $_) for ('parted_2b', 't_types');
}

# Snapshot read and stream insert of the same values: byte-identical "new".
{
	my $sink_dir = "$FindBin::RealBin/../sink";
	my $py = <<'PY';
import json, re, sqlite3, sys
sys.path.insert(0, sys.argv[1])
import replicant_sink as rs
db = sqlite3.connect(sys.argv[2])
dec = json.JSONDecoder()
out = {}
for (body,) in db.execute("SELECT body FROM bodies ORDER BY seq"):
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    pos = text.find('{"op":')
    while pos >= 0:
        change, end = dec.raw_decode(text, pos)
        if change["table"] == "t_types" and change["op"] in ("read", "insert"):
            at = text.index('"new":', pos, end) + len('"new":')
            raw = text[at:dec.raw_decode(text, at)[1]]
            new = rs.loads(raw)
            del new["id"]
            out["%s %d" % (change["op"], change["key"]["id"])] = {
                "raw": re.sub(r'^\{"id":-?\d+,', "{", raw),
                "canon": rs.canon(new)}
        pos = text.find('{"op":', end)
print(json.dumps(out))
PY
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ $ReplicantTest::PYTHON, '-c', $py, $sink_dir, $sink5->{db} ],
		'>', \$stdout, '2>', \$stderr)
	  or die "reading t_types bodies failed: $stderr";
	my $found = decode_json($stdout);
	for my $id (1, 2, 3)
	{
		my ($read, $insert) = ($found->{"read $id"}, $found->{ 'insert ' . ($id + 100) });
		ok($read && $insert, "type row $id: read by the snapshot and inserted by the stream")
		  or next;
		# As bytes: newer test frameworks die on a wide character in the log.
		note("type row $id as read, key removed: " . Encode::encode('UTF-8', substr($read->{raw}, 0, 900)));
		is($insert->{canon}, $read->{canon},
			"type row $id: snapshot and stream values are identical (canonical JSON)");
		is($insert->{raw}, $read->{raw},
			"type row $id: snapshot and stream \"new\" are byte-identical but for the key");
	}
}
query("SELECT replicant.drop_pipeline('p_shapes')");

# Published via the partition root: the snapshot reads every leaf and
# delivers its rows under the root (test/t/050_partition_root.pl has more).
my $sink6 = ReplicantTest::start_sink(name => 'sink_viaroot');
query('CREATE PUBLICATION pub_viaroot FOR TABLE parted WITH (publish_via_partition_root = true)');
query("SELECT replicant.create_pipeline('p_viaroot', 'pub_viaroot', '$sink6->{url}',"
	  . " snapshot => 'initial')");
ok( $node->poll_query_until('postgres',
		"SELECT state IN ('halted', 'streaming') FROM replicant.status WHERE pipeline = 'p_viaroot'"),
	'via partition root: the snapshot ends');
is(query("SELECT state || ': ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'p_viaroot'"),
	'streaming: ', 'via partition root: streaming after the snapshot');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink6, ['parted']),
	"via partition root: the sink holds the root's rows under the root's name");
is(lines($sink6->dump), query('SELECT count(*) FROM parted'),
	'via partition root: no rows under the leaves\' names');
query("SELECT replicant.drop_pipeline('p_viaroot')");

# A sink that refuses about a third of all requests with a 503: each batch
# of the snapshot is POSTed while the next is encoded, so the refusal often
# comes to an attempt that overlapped encoding.  Every batch is retried in
# its place: every row arrives exactly once, the markers bracket the reads.
{
	my $what = 'flaky sink';
	my $sink = ReplicantTest::start_sink(name => 'sink_flaky', dedup_ids => 1);
	create_padded_table('t_flaky', 6000);
	query('CREATE PUBLICATION pub_flaky FOR TABLE t_flaky');
	$sink->control({ fail_status => 503, fail_rate => 0.3 });
	query("SELECT replicant.create_pipeline('p_flaky', 'pub_flaky', '$sink->{url}',"
		  . " snapshot => 'initial', snapshot_workers => 2, batch_max_bytes => 65536)");
	wait_state('p_flaky', 'streaming', "$what: the snapshot finishes and the pipeline streams");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t_flaky']),
		"$what: sink equals source");
	$sink->control({ clear => 1 });
	cmp_ok($sink->stats->{faults_injected}, '>=', 5,
		"$what: premise: the sink refused requests during the snapshot");
	delivered_times($sink->deliveries('public.t_flaky'), [ 1 .. 6000 ], 1,
		"$what: every row was delivered exactly once");
	is(backfill_row('p_flaky', 't_flaky', 'state, percent = 100'), 'done|t', "$what: backfill done");
	markers_ok($sink, 'public.t_flaky', $what);
	query("SELECT replicant.drop_pipeline('p_flaky')");
}

note(sprintf('006_snapshot ran in %.0f s', time() - $started));
done_testing();
