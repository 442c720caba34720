# NATS: a server that stops reading while the worker publishes (review
# rv-nats 193).  libnats writes to the socket inline once its 32 kB buffer
# is full; the worker published with every signal blocked and no write
# deadline, so with the cluster paused and megabytes in flight the write
# blocked with SIGTERM blocked and pg_terminate_backend() did not reach the
# worker.  Now writes have a deadline and only the publish that starts the
# library's threads blocks signals.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('S', 'replicant.p.>');

my $node = ReplicantTest::new_node('rv_nats_blocked');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	ALTER TABLE t ALTER v SET STORAGE EXTERNAL;
	CREATE PUBLICATION pub FOR TABLE t;
});
sub poll { return ReplicantTest::poll($node, @_); }
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "', http_timeout_ms => 600000)");
$node->safe_psql('postgres', "INSERT INTO t VALUES (0, 'a')");
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'delivered');
my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");

$nats->pause_all;
# one transaction of 120 changes of ~90 kB each
$node->safe_psql('postgres', "INSERT INTO t SELECT g, repeat(md5(g::text), 2800) FROM generate_series(1, 120) g");
sleep 5;
my $stack = '';
if (-r "/proc/$pid/task/$pid/stack") { $stack = PostgreSQL::Test::Utils::slurp_file("/proc/$pid/task/$pid/stack"); }
my ($blk) = PostgreSQL::Test::Utils::slurp_file("/proc/$pid/task/$pid/status") =~ /^SigBlk:\s*([0-9a-f]+)/m;
note "worker main thread SigBlk $blk; wchan " . PostgreSQL::Test::Utils::slurp_file("/proc/$pid/wchan");
note $node->safe_psql('postgres', "SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $pid");

my $t0 = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
my $gone = 0;
while (time() - $t0 < 30) { if (!kill(0, $pid)) { $gone = 1; last; } usleep(50_000); }
my $took = time() - $t0;
ok($gone && $took < 10, sprintf('the worker exits after pg_terminate_backend while the cluster is paused (%s)',
	$gone ? sprintf('%.1f s', $took) : 'still running after 30 s'));
$nats->resume_all;
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'delivered after resume');
my @msgs = $nats->messages('S');
is_deeply([ Nats::problems(\@msgs, 'p') ], [], 'every change once, in order');
done_testing();
