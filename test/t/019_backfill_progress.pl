# Progress and planning for tables without statistics: backfill_status of
# an initial snapshot is 'running' with started_at from when reading began
# (a table read in one window used to stay 'planned' without started_at and
# get the end time as started_at), and its rows_done moves with every
# acknowledged batch (a table smaller than one window used to show 0
# until it jumped to the total); a never-analysed table's rows are
# estimated from its size (not 0), its bitmap ranges sized from that, and
# the 'auto' router reads its physical order when pg_stats has nothing;
# bitmap bounds do not depend on the caller's DateStyle.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('bf_progress', conf => 'autovacuum = off');

# Never vacuumed nor analysed: reltuples stays -1, pg_stats is empty.
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE big (id bigint PRIMARY KEY, v text);
	INSERT INTO big SELECT g, md5(g::text) || md5(g::text) FROM generate_series(1, 60000) g;
	CREATE TABLE seq (id bigint PRIMARY KEY, v text);
	INSERT INTO seq SELECT g, md5(g::text) FROM generate_series(1, 20000) g;
	CREATE TABLE rnd (id uuid PRIMARY KEY, v int);
	INSERT INTO rnd SELECT gen_random_uuid(), g FROM generate_series(1, 20000) g;
	CREATE PUBLICATION big_pub FOR TABLE big;
	CREATE PUBLICATION seq_pub FOR TABLE seq, rnd;
});
is($node->safe_psql('postgres',
		"SELECT bool_and(reltuples < 0) FROM pg_class WHERE relname IN ('big', 'seq', 'rnd')"),
	't', 'the tables were never analysed');

# ---- an initial snapshot, watched -------------------------------------------
my $sink = ReplicantTest::start_sink(delay_ms => 250);
is($node->safe_psql('postgres', "SELECT pg_relation_size('big') / 8192 < 1024"), 't',
	'big fits in one snapshot window');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('prog', 'big_pub', '$sink->{url}', snapshot => 'initial',"
	  . " batch_max_bytes => 262144)");
# The window takes many slowed requests; watch it being read.
my ($running, $partly, @seen);
my $deadline = time() + 180;
while (time() < $deadline)
{
	my ($state, $started, $done) = split /\|/, $node->safe_psql('postgres',
		"SELECT state, started_at IS NOT NULL, rows_done FROM replicant.backfill_status"
		  . " WHERE pipeline = 'prog'");
	last if defined $state && $state eq 'done';
	$running = 1 if defined $state && $state eq 'running' && $started eq 't' && $done == 0;
	$partly = 1 if defined $state && $state eq 'running' && $done > 0 && $done < 60000;
	push @seen, $done if defined $done && (!@seen || $seen[-1] != $done);
	usleep(50_000);
}
ok($running,
	"snapshot_progress_started_at_at_end: 'running' with started_at while the window is read, before its rows count");
ok($partly,
	'snapshot_progress_one_window: rows_done moves with the acknowledged batches of a table read in one window'
	  . ' (seen: ' . join(', ', @seen) . ')');
is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE pipeline = 'prog'"),
	'60000', 'the finished snapshot counts every row once');
my ($estimate, $started, $finished) = split /\|/, $node->safe_psql('postgres',
	"SELECT rows_estimate, started_at, finished_at FROM replicant.backfill_status WHERE pipeline = 'prog'");
ok($estimate > 30000 && $estimate < 120000,
	"never_analysed_estimate_zero (snapshot): rows estimated from the relation's size ($estimate)");
is($node->safe_psql('postgres', "SELECT '$finished'::timestamptz - '$started'::timestamptz > interval '1 second'"),
	't', 'started_at is when reading began, not the end');
$sink->stop;
my $log = slurp_file($node->logfile);
like($log, qr/replicant pipeline "prog" planned an initial snapshot of 1 table$/m,
	'snapshot_plan_log_plural: "1 table"');

# ---- backfills of never-analysed tables ---------------------------------------
my $sink2 = ReplicantTest::start_sink(name => 'backfills');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('est', 'seq_pub', '$sink2->{url}')");
my $auto = $node->safe_psql('postgres', "SELECT replicant.backfill('est', 'seq')");
is($node->safe_psql('postgres', "SELECT mode FROM replicant.backfill_status WHERE id = $auto"),
	'keyset', 'router_ignores_physical_order: auto reads a sequential key in key order without statistics');
my $est = $node->safe_psql('postgres', "SELECT rows_estimate FROM replicant.backfill_status WHERE id = $auto");
ok($est > 10000 && $est < 40000, "never_analysed_estimate_zero (backfill): $est rows estimated");
ok($node->poll_query_until('postgres', "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $auto"),
	'auto backfill of seq finishes');
my $rnd = $node->safe_psql('postgres', "SELECT replicant.backfill('est', 'rnd')");
is($node->safe_psql('postgres', "SELECT mode FROM replicant.backfill_status WHERE id = $rnd"),
	'ctid', 'auto reads a random key by block windows without statistics');
ok($node->poll_query_until('postgres', "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $rnd"),
	'auto backfill of rnd finishes');

my $bitmap = $node->safe_psql('postgres', "SELECT replicant.backfill('est', 'seq', mode => 'bitmap')");
ok($node->safe_psql('postgres', "SELECT coalesce(cardinality(bounds), 0) >= 5 FROM replicant.backfills WHERE id = $bitmap") eq 't',
	'bitmap_one_range_never_analysed: ranges sized from the table\'s pages');
ok($node->poll_query_until('postgres', "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $bitmap"),
	'bitmap backfill of seq finishes');
is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE id = $bitmap"),
	'20000', 'bitmap reads each row once');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink2, ['seq', 'rnd'], 60),
	'the sink equals the source');
$sink2->stop;

# ---- bitmap bounds whatever the caller's DateStyle ----------------------------
# The bounds are planned in the caller's session and parsed by the worker:
# rendered under 'SQL, DMY' (24/06/2025) and read under the worker's ISO,
# YMD, they would be other dates or no dates at all.
my $sink_dates = ReplicantTest::start_sink(name => 'dates');
$node->safe_psql('postgres', q{
	CREATE TABLE days (d date PRIMARY KEY, n int);
	INSERT INTO days SELECT date '2020-01-01' + g, g FROM generate_series(0, 19999) g;
	CREATE PUBLICATION days_pub FOR TABLE days;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('dates', 'days_pub', '$sink_dates->{url}')");
my $days = $node->safe_psql('postgres',
	"SET DateStyle = 'SQL, DMY'; SET TimeZone = 'Pacific/Chatham';"
	  . " SELECT replicant.backfill('dates', 'days', mode => 'bitmap')");
ok($node->safe_psql('postgres', "SELECT coalesce(cardinality(bounds), 0) >= 5 FROM replicant.backfills WHERE id = $days") eq 't',
	'bitmap_bounds_datestyle: several ranges');
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $days", 60),
	'bitmap_bounds_datestyle: a bitmap backfill planned under DateStyle SQL, DMY finishes');
is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE id = $days"),
	'20000', 'bitmap_bounds_datestyle: each row read once');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_dates, ['days'], 60),
	'bitmap_bounds_datestyle: the sink equals the source');
$sink_dates->stop;

# ---- estimates that are off ---------------------------------------------------
# over: reltuples says 100,000 where 90,000 are left; under: 60,000 where
# 100,000 are.  A running table never shows more than 100 % nor an estimate
# below what it delivered; a finished one shows its count and 100 %.
$node->safe_psql('postgres', q{
	CREATE TABLE over (id bigint PRIMARY KEY, v text);
	INSERT INTO over SELECT g, md5(g::text) FROM generate_series(1, 100000) g;
	VACUUM ANALYZE over;
	DELETE FROM over WHERE id % 10 = 0;
	CREATE TABLE under (id bigint PRIMARY KEY, v text);
	INSERT INTO under SELECT g, md5(g::text) FROM generate_series(1, 60000) g;
	VACUUM ANALYZE under;
	INSERT INTO under SELECT g, md5(g::text) FROM generate_series(60001, 100000) g;
	CREATE PUBLICATION est_pub FOR TABLE over, under;
});
my $sink3 = ReplicantTest::start_sink(name => 'estimates', delay_ms => 20);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('off', 'est_pub', '$sink3->{url}', snapshot => 'initial',"
	  . " batch_max_bytes => 262144, snapshot_workers => 1)");
my @bad;
$deadline = time() + 300;
while (time() < $deadline)
{
	my $rows = $node->safe_psql('postgres',
		"SELECT relation, state, rows_done, rows_estimate, percent FROM replicant.backfill_status"
		  . " WHERE pipeline = 'off'");
	my $all_done = $rows ne '';
	foreach my $row (split /\n/, $rows)
	{
		my ($rel, $state, $done, $est, $pct) = split /\|/, $row;
		push @bad, $row if $pct > 100 || ($state eq 'running' && $est < $done);
		$all_done &&= $state eq 'done';
	}
	last if $all_done;
	usleep(20_000);
}
is("@bad", '', 'progress_never_over_100: no sample above 100 % or below what was delivered');
is($node->safe_psql('postgres',
		"SELECT string_agg(relation || ':' || state || ':' || rows_done || ':' || rows_estimate || ':' || percent, ' '"
		  . " ORDER BY relation::text) FROM replicant.backfill_status WHERE pipeline = 'off'"),
	'over:done:90000:90000:100.0 under:done:100000:100000:100.0',
	'progress_estimate_becomes_count: a finished table\'s estimate is its count, at 100 %');
$sink3->stop;

# ---- a table read to its end, its snapshot not finished -----------------------
# tail's estimate says 5,000 rows, 4,000 are left; it is planned first (by
# OID) and read to its end, then the one snapshot worker reads tail_big
# through a slow sink, while tail stays 'running' until the whole snapshot
# ends.  Meanwhile tail must not stall below 100 %: each sample in which all
# of its shards are done shows its count and 100 %.
$node->safe_psql('postgres', q{
	CREATE TABLE tail (id bigint PRIMARY KEY, v text);
	INSERT INTO tail SELECT g, md5(g::text) FROM generate_series(1, 5000) g;
	VACUUM ANALYZE tail;
	DELETE FROM tail WHERE id > 4000;
	CREATE TABLE tail_big (id bigint PRIMARY KEY, v text);
	INSERT INTO tail_big SELECT g, md5(g::text) || md5(g::text) FROM generate_series(1, 150000) g;
	CREATE PUBLICATION tail_pub FOR TABLE tail, tail_big;
});
my $sink4 = ReplicantTest::start_sink(name => 'tail', delay_ms => 100);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('tail', 'tail_pub', '$sink4->{url}', snapshot => 'initial',"
	  . " snapshot_workers => 1, batch_max_bytes => 65536)");
my %samples;
$deadline = time() + 600;
while (time() < $deadline)
{
	my $sample = $node->safe_psql('postgres', q{
		SELECT st.state || ':' || st.rows_done || ':' || st.rows_estimate || ':' || st.percent
		  FROM replicant.backfill_status st JOIN replicant.backfills b ON b.id = st.id
		 WHERE st.pipeline = 'tail' AND st.relation = 'tail'::regclass AND st.state = 'running'
		   AND EXISTS (SELECT FROM replicant.snapshot_shards s WHERE s.backfill_id = b.id)
		   AND NOT EXISTS (SELECT FROM replicant.snapshot_shards s WHERE s.backfill_id = b.id AND NOT s.done)});
	$samples{$sample} = 1 if $sample ne '';
	last if $node->safe_psql('postgres',
		"SELECT bool_and(state = 'done') FROM replicant.backfill_status WHERE pipeline = 'tail'") eq 't';
	usleep(20_000);
}
ok(%samples, 'read_to_end: tail was seen read to its end while the snapshot went on');
is(join(' ', sort keys %samples), 'running:4000:4000:100.0',
	'progress_read_to_end: a table read to its end shows its count and 100 % before its snapshot ends');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('tail')");
$sink4->stop;

# ---- who may watch progress -----------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE watcher LOGIN;
	GRANT USAGE ON SCHEMA replicant TO watcher;
	GRANT SELECT ON replicant.status TO watcher;
	CREATE ROLE monitor LOGIN;
	GRANT pg_monitor TO monitor;
	CREATE ROLE bystander LOGIN;
	GRANT USAGE ON SCHEMA replicant TO bystander;
});
foreach my $who ('watcher', 'monitor')
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT count(*) FROM replicant.backfill_status WHERE pipeline = 'off'",
		extra_params => [ '-U', $who ]);
	is($out, '2', "backfill_status_readers: $who reads backfill_status") or diag($err);
}
my ($ret, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM replicant.backfill_status',
	extra_params => [ '-U', 'bystander' ]);
like($err, qr/permission denied for view backfill_status/,
	'a role that may not read replicant.status may not read progress either');

done_testing();
