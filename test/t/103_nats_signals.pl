# NATS JetStream destination inside Postgres (issue #36 item 4): while the
# worker waits for acknowledgements from a paused cluster (SIGSTOP: the
# connections stay open, nothing answers), a configuration reload reaches
# it, pg_terminate_backend() ends it at once (the acknowledgement timeout is
# ten minutes), and so does the postmaster's death; a large transaction
# meeting the paused cluster grows the worker by little (at most 256
# messages in flight).  The library's threads block every signal.
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

# DEBUG1: the line a worker logs as it starts waiting for acknowledgements
my $node = ReplicantTest::new_node('nats_signals', conf => 'log_min_messages = debug1');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "', http_timeout_ms => 600000)");

sub poll { return ReplicantTest::poll($node, @_); }

sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'p'");
}

my $n = 0;
sub insert
{
	$n++;
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($n, 'v')");
}

insert();
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'connected and delivered');
my $pid = worker_pid();

# The library's threads: every signal blocked.
my @threads = grep { $_ != $pid } map { m{/(\d+)$} ? $1 : () } glob("/proc/$pid/task/*");
ok(@threads > 0, 'the worker runs the library\'s threads (' . scalar(@threads) . ')');
my @unblocked;
foreach my $tid (@threads)
{
	my ($blk) = PostgreSQL::Test::Utils::slurp_file("/proc/$pid/task/$tid/status") =~ /^SigBlk:\s*([0-9a-f]+)/m;
	my $mask = hex($blk);
	# SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGCHLD
	my @open = grep { !($mask & (1 << ($_ - 1))) } (1, 2, 3, 10, 12, 13, 14, 15, 17);
	push @unblocked, "thread $tid takes signals @open" if @open;
}
is_deeply(\@unblocked, [], 'no library thread takes the process\'s signals');

# waiting for acknowledgements from a paused cluster
sub wait_for_acks
{
	my ($label) = @_;
	my $offset = -s $node->logfile;
	$nats->pause_all;
	insert();
	# the publish went out; its acknowledgement never comes
	$node->wait_for_log(qr/pipeline "p" waits for acknowledgements of 1 NATS messages/, $offset);
	ok(poll("SELECT wait_event = 'Extension' FROM pg_stat_activity WHERE pid = " . worker_pid(), 60),
		"$label: the worker waits");
}

# a reload reaches the worker while it waits: it then holds at 'after_ack'
wait_for_acks('reload');
{
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'after_ack:hold'");
	# only the worker is told; the file goes back once the worker held
	kill 'HUP', worker_pid();
	$nats->resume_all;
	ok(eval { $node->wait_for_log(qr/fault point "after_ack" reached, holding/, $offset); 1 },
		'reload: the setting read during the wait applies to the acknowledged batch');
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point');
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'reload: delivered');
}

# pg_terminate_backend while waiting
wait_for_acks('terminate');
{
	my $old = worker_pid();
	my $t0 = time();
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	my $gone = 0;
	while (time() - $t0 < 60) { if (!kill(0, $old)) { $gone = 1; last; } usleep(50_000); }
	my $took = time() - $t0;
	ok($gone && $took < 10, sprintf('terminate: the worker exits while the cluster is paused (%.1f s)', $took));
	$nats->resume_all;
	ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'terminate: delivered after');
}

# memory stays bounded: a transaction of 20,000 changes (about 30 MB of
# messages) meets a paused cluster; the worker holds at most 256 messages
# (8 MB) unacknowledged and waits.  Its growth includes the batch itself
# (in memory up to replicant.batch_memory_limit), so the bound is loose.
#
# The cluster resumed, its nodes may elect the stream's leader again (on a
# loaded machine they wake one after the other, past their election
# timeouts), and a leader stepping down drops the publishes it had not
# stored: their acknowledgements never come, and the worker publishes them
# again once its acknowledgement timeout passes without one.  Ten minutes
# (above) would outlast the wait below: 30 s here.
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', http_timeout_ms => 30000)");
{
	# A worker publishes the first change after it read the stream alone
	# (the stream may hold it already): this one, so that the batch below
	# goes out 256 at a time.
	insert();
	ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120),
		'memory: the restarted worker published');
	my $worker = worker_pid();
	my $rss = sub {
		my ($kb) = PostgreSQL::Test::Utils::slurp_file("/proc/$worker/status") =~ /^VmRSS:\s*(\d+)/m;
		return $kb;
	};
	my $before = $rss->();
	my $offset = -s $node->logfile;
	$nats->pause_all;
	$node->safe_psql('postgres',
		"INSERT INTO t SELECT g, repeat(md5(g::text), 45) FROM generate_series(100000, 119999) g");
	$n += 20000;
	# as many in flight as it takes: it waits for one to be acknowledged
	$node->wait_for_log(qr/pipeline "p" waits for acknowledgements of 256 NATS messages/, $offset);
	ok(poll("SELECT wait_event = 'Extension' FROM pg_stat_activity WHERE pid = $worker", 60),
		'memory: the worker waits for acknowledgements');
	my $during = $rss->();
	cmp_ok($during - $before, '<', 64 * 1024,
		sprintf('memory: the worker grew %.1f MB (the rendered batch included) while the cluster held 20,000 changes back',
			($during - $before) / 1024));
	$nats->resume_all;
	ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 180), 'memory: delivered after');
}

my @msgs = $nats->messages('S');
is_deeply([ Nats::problems(\@msgs, 'p') ], [], 'every change once, in order');
is(scalar(grep { ($_->{headers}{'Replicant-Kind'} // '') eq 'change' } @msgs), $n, "all $n changes");

# the postmaster dies while the worker waits
wait_for_acks('postmaster death');
{
	my $worker = worker_pid();
	my $postmaster = $node->{_pid};
	my $t0 = time();
	kill 'KILL', $postmaster;
	my $gone = 0;
	while (time() - $t0 < 60) { if (!kill(0, $worker)) { $gone = 1; last; } usleep(50_000); }
	my $took = time() - $t0;
	ok($gone && $took < 10, sprintf('postmaster death: the worker exits (%.1f s)', $took));
	$node->{_pid} = undef;    # nothing left to stop
	$nats->resume_all;
}
done_testing();
