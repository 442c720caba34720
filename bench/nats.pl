# bench/nats.pl -- NATS JetStream destination (issue #36 item 6): changes
# per second into a 3-replica stream, beside a C publisher of the same
# messages, and commit-to-stream latency at 500 txn/s.  Runs as a TAP file
# on a private PostgreSQL and a three-node cluster (test/Nats.pm):
#
#   PG_TEST_PORT_DIR=/tmp/replicant-portlock bash .ci/suite.sh \
#       "$(bash test/private-pg.sh /var/tmp/pg-DIR)" bench/nats.pl
#
# 1. Throughput: ROWS rows in transactions of 10 are committed while the
#    pipeline is disabled; then it is enabled and timed until
#    await_delivered() (every message acknowledged, checkpoint written).
#    Anchor, same round: the messages the pipeline wrote, read back from the
#    stream with their subjects and headers, published again by
#    test/nats/nats_tool.c ("publish": asynchronous, 256 in flight, msg ids)
#    into the stream made anew, timed until every acknowledgement.
# 2. Latency: pgbench -R 500 inserts one row per transaction, its ts
#    column clock_timestamp() at the insert; for each row, the stream's
#    store time of its message minus ts (the acknowledgement follows the
#    store once two of three replicas have it).  p50 and p99.
# Results are printed as "# RESULT ..." lines (bench/RESULTS.md).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../test";
use List::Util qw(sum);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ReplicantTest;
use Nats;

Nats::require_server();

my $ROWS   = $ENV{NATS_BENCH_ROWS}   // 100000;
my $ROUNDS = $ENV{NATS_BENCH_ROUNDS} // 3;
my $SUBJECTS = 'replicant.b.>';

my $nats = Nats->start;
my $node = ReplicantTest::new_node('nats_bench');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, v text, n int);
	CREATE TABLE lat (id bigserial PRIMARY KEY, ts timestamptz NOT NULL);
	CREATE PUBLICATION pub FOR TABLE t, lat;
});
my $dir = PostgreSQL::Test::Utils::tempdir('bench');
PostgreSQL::Test::Utils::append_to_file("$dir/insert10.sql",
	"INSERT INTO t (v, n) SELECT md5(g::text), g FROM generate_series(1, 10) g;\n");
PostgreSQL::Test::Utils::append_to_file("$dir/lat.sql",
	"INSERT INTO lat (ts) VALUES (clock_timestamp());\n");

sub delivered
{
	ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('b', pg_current_wal_lsn(), 1000)", 600),
		'delivered');
}

my (@replicant_rates, @anchor_rates);
foreach my $round (1 .. $ROUNDS)
{
	$nats->tool('delete', 'B');
	$nats->create_stream('B', $SUBJECTS);
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('b')") if $round > 1;
	$node->safe_psql('postgres', 'TRUNCATE t');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('b', 'pub', '" . $nats->url('B') . "', enabled => false)");
	$node->command_ok([ 'pgbench', '-n', '-f', "$dir/insert10.sql", '-t', $ROWS / 10, '-c', '1',
		$node->connstr('postgres') ], "round $round: $ROWS rows committed");
	my $t0 = time();
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('b')");
	delivered();
	my $seconds = time() - $t0;
	my $messages = scalar(grep { /"Replicant-Kind":"change"/ } split /\n/, ($nats->tool('dump', 'B'))[1]);
	is($messages, $ROWS, "round $round: $ROWS messages in the stream");
	push @replicant_rates, $ROWS / $seconds;
	diag(sprintf('RESULT round %d replicant: %d changes in %.2f s = %.0f changes/s',
			$round, $ROWS, $seconds, $ROWS / $seconds));

	$nats->tool_ok('dumpraw', 'B', "$dir/raw");
	$nats->tool('delete', 'B');
	$nats->create_stream('B', $SUBJECTS);
	my $out = $nats->tool_ok('publish', 'B', "$dir/raw", 256);
	my ($count, $pub_s) = split ' ', $out;
	push @anchor_rates, $count / $pub_s;
	diag(sprintf('RESULT round %d C publisher: %d messages in %.2f s = %.0f msg/s',
			$round, $count, $pub_s, $count / $pub_s));
}
my @sorted = sort { $a <=> $b } @replicant_rates;
my @anchors = sort { $a <=> $b } @anchor_rates;
my @ratios = sort { $a <=> $b } map { $replicant_rates[$_] / $anchor_rates[$_] } 0 .. $#replicant_rates;
diag(sprintf('RESULT throughput: replicant median %.0f changes/s (%.0f-%.0f), C publisher median %.0f msg/s (%.0f-%.0f), ratio median %.2f (%.2f-%.2f)',
		$sorted[ $#sorted / 2 ], $sorted[0], $sorted[-1], $anchors[ $#anchors / 2 ], $anchors[0], $anchors[-1],
		$ratios[ $#ratios / 2 ], $ratios[0], $ratios[-1]));

# 2. latency at 500 txn/s
$nats->tool('delete', 'B');
$nats->create_stream('B', $SUBJECTS);
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('b')");
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('b', 'pub', '" . $nats->url('B') . "')");
$node->safe_psql('postgres', 'INSERT INTO lat (ts) VALUES (clock_timestamp())');
delivered();
$node->command_ok([ 'pgbench', '-n', '-f', "$dir/lat.sql", '-R', '500', '-T', '20', '-c', '2',
	$node->connstr('postgres') ], '20 s at 500 txn/s');
delivered();
my %ts = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres', 'SELECT id, extract(epoch FROM ts) FROM lat');
my @latencies;
foreach my $m ($nats->messages('B'))
{
	next unless ($m->{json}{table} // '') eq 'lat' && $m->{json}{op} eq 'insert';
	my $id = $m->{json}{new}{id};
	push @latencies, ($m->{time} / 1e9 - $ts{$id}) * 1000 if defined $ts{$id};
}
@latencies = sort { $a <=> $b } @latencies;
ok(@latencies > 9000, scalar(@latencies) . ' latencies');
diag(sprintf('RESULT latency at 500 txn/s: %d txns, commit-to-stream p50 %.2f ms, p99 %.2f ms, max %.2f ms',
		scalar(@latencies), $latencies[ int(@latencies * 0.5) ], $latencies[ int(@latencies * 0.99) ], $latencies[-1]));
done_testing();
