# NATS JetStream destination through failures (issue #36 item 5), on a
# three-node cluster whose stream keeps ids for 2 s only (its duplicate
# window) and whose servers take messages of at most 64 kB:
#   (a) the worker killed (kill -9) between the acknowledgements and the
#       checkpoint, held there longer than the duplicate window;
#   (b) the stream leader's node killed, then restarted;
#   (c) the whole cluster down longer than the duplicate window, then back;
#   (e) a change larger than max_payload: the pipeline halts, value-free.
# After each, a consumer of the stream (test/nats/nats_tool.c) finds every
# change exactly once, in commit order, and the tables equal to the source.
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

my $WINDOW_MS = 2000;
my $nats = Nats->start(max_payload => 65536);
$nats->create_stream('S', 'replicant.p.>', duplicates_ms => $WINDOW_MS);

my $node = ReplicantTest::new_node('nats_faults', conf => 'restart_after_crash = on');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text, n bigint);
	CREATE TABLE log (txn int PRIMARY KEY);
	CREATE PUBLICATION pub FOR TABLE t, log;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "', http_timeout_ms => 3000)");

sub poll { return ReplicantTest::poll($node, @_); }

srand(101);
my $txns = 0;
sub workload
{
	my ($n) = @_;
	foreach (1 .. $n)
	{
		$txns++;
		my @sql = ("INSERT INTO log VALUES ($txns)");
		foreach (1 .. 1 + int(rand(5)))
		{
			my $id = 1 + int(rand(50));
			push @sql,
			  rand() < 0.75
			  ? "INSERT INTO t VALUES ($id, 'v$txns', $txns) ON CONFLICT (id) DO UPDATE SET v = excluded.v, n = t.n + 1"
			  : "DELETE FROM t WHERE id = $id";
		}
		$node->safe_psql('postgres', join(";\n", 'BEGIN', @sql, 'COMMIT'));
	}
}

sub delivered
{
	my ($label) = @_;
	ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 180),
		"$label: delivered");
}

sub check
{
	my ($label) = @_;
	my @msgs = $nats->messages('S');
	my @problems = Nats::problems(\@msgs, 'p');
	is_deeply([ @problems[ 0 .. ($#problems < 9 ? $#problems : 9) ] ], [],
		"$label: every change once, in commit order");
	is_deeply(Nats::table_state(\@msgs, 'public', 't'),
		Nats::source_state($node, 'postgres', 't', ['id']), "$label: t equals the source");
	my %logged;
	$logged{ $_->{json}{new}{txn} }++
	  foreach grep { ($_->{json}{table} // '') eq 'log' } @msgs;
	is(scalar(keys %logged), $txns, "$label: all $txns transactions are in the stream");
	is(scalar(grep { $_ != 1 } values %logged), 0, "$label: none twice");
}

sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'p'");
}

workload(40);
delivered('start');
check('start');

# (a) held at 'after_ack' (acknowledged, not checkpointed) past the
# duplicate window, then kill -9: the restarted worker decodes the batch
# again, and only asking the stream keeps it from being written twice.
# Only the worker reads the fault point (SIGHUP to it alone), so the
# workers after the crash restart do not hold.
{
	ok(poll("SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'p'"), '(a) worker runs');
	my $pid = worker_pid();
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'after_ack:hold'");
	kill 'HUP', $pid;
	workload(10);
	$node->wait_for_log(qr/fault point "after_ack" reached, holding/, $offset);
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point');
	# the held batch is in the stream, beyond the checkpoint: the next
	# worker decodes it again
	my $checkpoint = $node->safe_psql('postgres',
		"SELECT (checkpoint_lsn - '0/0')::numeric FROM replicant.status WHERE pipeline = 'p'");
	my ($in_stream) = sort { $b <=> $a }
	  map { $_->{headers}{'Replicant-Commit-Lsn'} // 0 } $nats->messages('S');
	cmp_ok($in_stream, '>', $checkpoint, '(a) acknowledged changes beyond the checkpoint are in the stream');
	sleep(2 * $WINDOW_MS / 1000 + 1);    # the ids of the held batch expire
	kill 'KILL', $pid;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	ok(poll("SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'p'", 120),
		'(a) a worker runs after the crash');
	workload(10);
	delivered('(a)');
	check('(a) kill -9 between acknowledgement and checkpoint');
}

# (b) the stream leader's node killed while the workload goes on
{
	my $leader = $nats->leader('S');
	my ($i) = $leader =~ /^n(\d)$/ or die "no leader: $leader";
	workload(5);
	$nats->stop_node($i, 'KILL');
	workload(20);
	delivered('(b) leader down');
	$nats->start_node($i);
	workload(10);
	delivered('(b)');
	check("(b) the leader ($leader) killed and restarted");
	my $deadline = time() + 60;
	my $new_leader = '';
	while (($new_leader = $nats->leader('S')) eq '' && time() < $deadline)
	{
		usleep(200_000);
	}
	isnt($new_leader, '', '(b) the stream has a leader again');
}

# (c) the whole cluster down longer than the duplicate window
{
	$nats->stop_all('KILL');
	workload(20);
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'p'", 60),
		'(c) the pipeline retries while the cluster is down');
	sleep(2 * $WINDOW_MS / 1000 + 1);
	$nats->start_all;
	workload(10);
	delivered('(c)');
	check('(c) the cluster down longer than the duplicate window');
	is($node->safe_psql('postgres', "SELECT last_error IS NULL FROM replicant.status WHERE pipeline = 'p'"),
		't', '(c) no error left');
}

# (e) a change larger than the servers' max_payload halts, value-free
{
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"INSERT INTO t SELECT 1000, string_agg(md5(g::text), '') || upper('secretvalue'), 0 FROM generate_series(1, 3000) g");
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'", 60), '(e) the pipeline halts');
	my $reason = $node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'p'");
	like($reason, qr/larger than the NATS server's max_payload/, '(e) the halt says why');
	unlike($reason . PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset),
		qr/SECRETVALUE/, '(e) no value in the reason or the log');
	# the source without the row the stream could not take
	$node->safe_psql('postgres', 'DELETE FROM t WHERE id = 1000');
	check('(e) nothing of the large change');
}

done_testing();
