# A random workload from two concurrent clients over tables with a
# composite key, REPLICA IDENTITY FULL and a TOASTed column, with key
# changes and a TRUNCATE, survived across a sink outage (while the workload
# keeps writing) and a server restart: the sink ends up equal to the source,
# in commit order.
use strict;
use warnings;
use Time::HiRes qw(time sleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('workload');
my $sink = ReplicantTest::start_sink(secret => 'whsec_c2VjcmV0LWZvci10ZXN0cw==');

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t_comp (a int, b int, v text, PRIMARY KEY (a, b));
CREATE TABLE t_full (id int NOT NULL, v text, n int);
ALTER TABLE t_full REPLICA IDENTITY FULL;
CREATE TABLE t_toast (id int PRIMARY KEY, big text, counter int);
ALTER TABLE t_toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE t_unpublished (id int PRIMARY KEY, v text);
CREATE PUBLICATION work_pub FOR TABLE t_comp, t_full, t_toast;

-- One random change; unique violations from racing clients are skipped.
CREATE FUNCTION work_step() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  r int := (random() * 100)::int;
  k int := (random() * 300)::int;
BEGIN
  IF r < 25 THEN
    INSERT INTO t_comp VALUES (k % 10, k, md5(random()::text)) ON CONFLICT DO NOTHING;
  ELSIF r < 35 THEN
    UPDATE t_comp SET v = md5(random()::text) WHERE a = k % 10 AND b = k;
  ELSIF r < 42 THEN
    -- key change
    UPDATE t_comp SET b = b + 1000 * (1 + (random() * 1000)::int)
     WHERE (a, b) = (SELECT a, b FROM t_comp WHERE a = k % 10 LIMIT 1);
  ELSIF r < 47 THEN
    DELETE FROM t_comp WHERE a = k % 10 AND b = k;
  ELSIF r < 62 THEN
    INSERT INTO t_full VALUES (nextval('full_ids'), md5(random()::text), k);
  ELSIF r < 70 THEN
    UPDATE t_full SET n = n + 1, v = md5(random()::text) WHERE id % 300 = k;
  ELSIF r < 74 THEN
    DELETE FROM t_full WHERE id % 300 = k;
  ELSIF r < 84 THEN
    INSERT INTO t_toast
      SELECT k, string_agg(md5(random()::text), ''), 0 FROM generate_series(1, 150)
    ON CONFLICT (id) DO NOTHING;
  ELSIF r < 96 THEN
    -- touches only counter: big stays an unchanged TOAST pointer
    UPDATE t_toast SET counter = counter + 1 WHERE id = k;
  ELSE
    DELETE FROM t_toast WHERE id = k;
  END IF;
  INSERT INTO t_unpublished VALUES (k, 'noise') ON CONFLICT (id) DO UPDATE SET v = 'again';
EXCEPTION WHEN unique_violation THEN
  NULL;
END $$;
CREATE SEQUENCE full_ids;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('work', 'work_pub', '$sink->{url}', "
	  . "secret => 'whsec_c2VjcmV0LWZvci10ZXN0cw==')");

my $script = PostgreSQL::Test::Utils::tempdir() . '/work.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"BEGIN;\nSELECT work_step();\nSELECT work_step();\nSELECT work_step();\nCOMMIT;\n");

# Two clients in the background; returns the harness.  With $seconds the
# clients run until stopped (or for that long), else for $txns each.
sub start_workload
{
	my ($txns, $seconds) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', '2', defined $seconds ? ('-T', $seconds) : ('-t', $txns),
			'--max-tries=50', '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

sub poll { return ReplicantTest::poll($node, @_); }

# The sink's applied transactions so far (its stats work while it is down).
sub sunk { return $sink->stats->{transactions_applied} // 0; }

my @tables = qw(t_comp t_full t_toast);

# Phase 1: the sink goes away while the workload runs, and stays away until
# the pipeline has retried and the workload has written more meanwhile; the
# workload runs by time, so how fast the machine is does not matter.
my $started = time();
my $work = start_workload(undef, 900);
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep 0.2 until sunk() > 0 || time() > $deadline;
cmp_ok(sunk(), '>', 0, 'the workload reached the sink before the outage');
$sink->stop;
my $stopped_at = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
ok(poll("SELECT retries > 0 FROM replicant.status WHERE pipeline = 'work'", 120),
	'the outage was retried');
ok(poll("SELECT pg_current_wal_lsn() - '$stopped_at' > 4000000", 120),
	'the workload kept writing during the outage');
ok($work->pumpable, 'the workload was still running when the sink came back');
$sink->restart;
my $after = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
ok(poll("SELECT replicant.await_delivered('work', '$after', 1000)", 120),
	'delivery resumed while the workload runs');
$work->signal('TERM');    # pgbench turns SIGINT into query cancels
$work->finish;
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, \@tables),
	'sink equals source after a sink outage');

# Phase 2: the server restarts in the middle of the workload.
my $before = sunk();
$work = start_workload(1200);
$deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep 0.2 until sunk() > $before || time() > $deadline;
$node->restart(fail_ok => 1);
$work->finish;
$work = start_workload(600);
$node->safe_psql('postgres', 'TRUNCATE t_toast');
$work->finish;
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, \@tables),
	'sink equals source after a server restart and a TRUNCATE');
my $elapsed = time() - $started;

# Commit order: the sink applied transactions in strictly increasing LSNs.
my @log = @{ $sink->txlog };
my $ordered = 1;
for my $i (1 .. $#log)
{
	$ordered = 0 if $log[$i]{commit_lsn} <= $log[ $i - 1 ]{commit_lsn};
}
ok($ordered, 'transactions applied in commit order');

my $changes = 0;
$changes += $_->{nchanges} for @log;
cmp_ok($changes, '>=', 10000, "at least 10,000 changes delivered ($changes)");
note(sprintf('%d changes in %d transactions delivered in %.1f s', $changes, scalar(@log), $elapsed));

my $stats = $sink->stats;
is($stats->{bad_signatures}, 0, 'every batch carried a valid signature');

# The unpublished table never reached the sink.
is($sink->dump('public.t_unpublished'), '', 'unpublished table never delivered');

my $status = $node->safe_psql('postgres',
	"SELECT state, last_error IS NULL FROM replicant.status WHERE pipeline = 'work'");
is($status, 'streaming|t', 'pipeline streaming without error');

done_testing();
