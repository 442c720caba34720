# A random workload from two concurrent clients over tables with a
# composite key, REPLICA IDENTITY FULL and a TOASTed column, with key
# changes and a TRUNCATE, survived across a sink outage and a server
# restart: the sink ends up equal to the source, in commit order.
use strict;
use warnings;
use Time::HiRes qw(time);
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

# Two clients in the background; returns the harness.
sub start_workload
{
	my ($txns) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', '2', '-t', $txns, '--max-tries=50', '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

my @tables = qw(t_comp t_full t_toast);

# Phase 1: the sink goes away for 20 s in the middle of the workload.
my $started = time();
my $work = start_workload(2000);
sleep 2;
$sink->stop;
sleep 20;
$sink->restart;
$work->finish;
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, \@tables),
	'sink equals source after a 20 s sink outage');
my $retries = $node->safe_psql('postgres', "SELECT retries FROM replicant.status");
cmp_ok($retries, '>', 0, 'the outage was retried');

# Phase 2: the server restarts in the middle of the workload.
$work = start_workload(1200);
sleep 2;
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
