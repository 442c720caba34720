# NATS: connecting is not deaf to SIGTERM (review rv-nats 192).  Servers
# that accept TCP but never send INFO (a hung node, a stalled proxy): the
# worker blocked every signal across natsConnection_Connect, which tries
# each of up to 16 servers for 2 s, and took 29 s to exit after
# pg_terminate_backend().  Now the connection is made in a thread of its
# own, which the worker waits for in slices, answering interrupts.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ReplicantTest;

my @listeners;
foreach (1 .. 16)
{
	push @listeners, IO::Socket::INET->new(Listen => 64, LocalAddr => '127.0.0.1', LocalPort => 0,
		Proto => 'tcp', ReuseAddr => 1) or die "listen: $!";
}
my $hosts = join(',', map { '127.0.0.1:' . $_->sockport } @listeners);

my $node = ReplicantTest::new_node('rv_nats_deaf');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
sub poll { return ReplicantTest::poll($node, @_); }
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', 'nats://$hosts/S')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'a')");
ok(poll("SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'p'", 60), 'worker runs');
my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
# let it reach the connect (the row is decoded and sent at once)
sleep 3;
note $node->safe_psql('postgres', "SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $pid");
my $t0 = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
my $gone = 0;
while (time() - $t0 < 90) { if (!kill(0, $pid)) { $gone = 1; last; } usleep(50_000); }
my $took = time() - $t0;
ok($gone && $took < 5, sprintf('the worker exits promptly after pg_terminate_backend (%.1f s)', $took));
done_testing();
