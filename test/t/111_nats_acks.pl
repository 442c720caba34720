# NATS JetStream destination: what counts as acknowledged.
#   (a) a late acknowledgement: the acknowledgement handler of a connection
#       the worker gave up on (its wait timed out) runs only after the
#       worker connected again and published the next batch, to a cluster
#       that is paused (SIGSTOP) and so acknowledges nothing.  It must not
#       count for that batch: fault point "nats_ack:hold" holds the
#       handler, as a thread descheduled inside it would be.
#   (b) a duplicate acknowledgement inside a batch: a restart finds the
#       stream without the pipeline's last messages (purged, as a work
#       queue's consumer would remove them) while their ids are still in
#       the duplicate window, so the batch it sends again starts with
#       messages JetStream answers as duplicates, followed by new ones.
#       It converges, writing each change once, instead of failing the new
#       messages' expected sequence again and again.
#   (c) another writer of the stream: a stream that takes subjects outside
#       the pipeline's prefix halts the pipeline before it publishes (a
#       message there would move the sequence the chain expects).  Inside
#       the prefix nothing can keep another writer out: one message of it
#       between two batches, and the next batch's first change is refused
#       for its expected sequence while its second, expecting one more,
#       finds the sequence it expects and is stored without it.  The
#       pipeline halts rather than go on without the refused change.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('L', 'replicant.l.>');
$nats->create_stream('D', 'replicant.d.>', duplicates_ms => 600000);
$nats->create_stream('F', 'f.>', duplicates_ms => 1000);
$nats->create_stream('G', 'g.p.>', duplicates_ms => 1000);

# DEBUG1: the line a worker logs as it starts waiting for acknowledgements
my $node = ReplicantTest::new_node('nats_acks', conf => 'log_min_messages = debug1');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});

sub poll { return ReplicantTest::poll($node, @_); }

sub worker_pid
{
	my ($p) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = '$p'");
}

sub status
{
	my ($p, $column) = @_;
	return $node->safe_psql('postgres', "SELECT $column FROM replicant.status WHERE pipeline = '$p'");
}

my $n = 0;
sub insert_txn
{
	my ($rows) = @_;
	my @sql = map { $n++; "INSERT INTO t VALUES ($n, 'v$n')" } 1 .. $rows;
	return $node->safe_psql('postgres',
		join(";\n", 'BEGIN', @sql, 'COMMIT', 'SELECT pg_current_wal_lsn()'));
}

sub log_has
{
	my ($re, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset) =~ $re;
}

# (a) a late acknowledgement of a connection the worker gave up on
{
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('l', 'pub', '" . $nats->url('L') . "', http_timeout_ms => 3000)");
	my $lsn = insert_txn(1);
	ok(poll("SELECT replicant.await_delivered('l', '$lsn', 1000)", 120), '(a) delivered');

	# the next acknowledgement's handler holds: insert until one does
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'nats_ack:hold'");
	kill 'HUP', worker_pid('l');
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $held = 0;
	while (!$held && time() < $deadline)
	{
		$lsn = insert_txn(1);
		while (time() < $deadline)
		{
			$held = log_has(qr/fault point "nats_ack" reached, holding/, $offset) and last;
			last if $node->safe_psql('postgres', "SELECT replicant.await_delivered('l', '$lsn', 100)") eq 't';
		}
	}
	ok($held, '(a) an acknowledgement handler holds');
	# the worker's wait times out, it connects again: the stream has the
	# message, and the retry that skips it is delivered
	ok(poll("SELECT replicant.await_delivered('l', '$lsn', 1000)", 120), '(a) the held batch is delivered by its retry');
	ok(log_has(qr/pipeline "l" could not deliver to its sink, retrying: timed out waiting for NATS acknowledgements/,
			$offset),
		'(a) after its wait timed out');

	# The next batch meets a paused cluster; the held handler goes on while
	# the worker waits for that batch's acknowledgement.
	my $delivered = status('l', 'transactions_delivered');
	my $retries = status('l', 'retries');
	$nats->pause_all;
	$offset = -s $node->logfile;
	my $b_lsn = insert_txn(1);
	$node->wait_for_log(qr/pipeline "l" waits for acknowledgements of 1 NATS messages/, $offset);
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point');
	kill 'HUP', worker_pid('l');
	ok(poll("SELECT transactions_delivered > $delivered OR retries > $retries"
			  . " FROM replicant.status WHERE pipeline = 'l'", 120),
		'(a) the batch ends');
	is(status('l', 'transactions_delivered'), $delivered,
		'(a) the late acknowledgement did not deliver the batch the paused cluster did not acknowledge');
	is($node->safe_psql('postgres', "SELECT replicant.await_delivered('l', '$b_lsn', 0)"), 'f',
		'(a) nothing acknowledged past the last batch');
	$nats->resume_all;
	ok(poll("SELECT replicant.await_delivered('l', '$b_lsn', 1000)", 120), '(a) delivered after');
	my @msgs = $nats->messages('L');
	is_deeply([ Nats::problems(\@msgs, 'l') ], [], '(a) every change once, in commit order');
	is(scalar(@msgs), $n, "(a) all $n changes");
}

# (b) a duplicate acknowledgement inside a batch
{
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('d', 'pub', '" . $nats->url('D') . "', http_timeout_ms => 3000)");
	insert_txn(2) foreach 1 .. 3;
	ok(poll("SELECT replicant.await_delivered('d', pg_current_wal_lsn(), 1000)", 120), '(b) delivered');

	# A is acknowledged, not checkpointed; B commits meanwhile
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'after_ack:hold'");
	kill 'HUP', worker_pid('d');
	my $first = $n + 1;
	insert_txn(3);
	$node->wait_for_log(qr/fault point "after_ack" reached, holding/, $offset);
	my @a = map { $_->{headers}{'Nats-Msg-Id'} } $nats->messages('D');
	insert_txn(3);
	my $b_lsn = insert_txn(3);

	# the pipeline's messages leave the stream; their ids stay in its window
	$nats->tool_ok('purge', 'D');
	is(scalar($nats->messages('D')), 0, '(b) the stream is purged');
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point');
	my $old = worker_pid('d');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(poll("SELECT coalesce(worker_pid, $old) <> $old FROM replicant.status WHERE pipeline = 'd'", 120),
		'(b) a new worker runs');
	my $retries = status('d', 'retries');

	# The new worker sends A again, then B: A's messages are duplicates.
	ok(poll("SELECT replicant.await_delivered('d', '$b_lsn', 100)"
			  . " OR (SELECT retries >= $retries + 5 FROM replicant.status WHERE pipeline = 'd')", 120),
		'(b) delivered, or retried 5 times');
	is($node->safe_psql('postgres', "SELECT replicant.await_delivered('d', '$b_lsn', 100)"), 't',
		'(b) the batch that begins with duplicates is delivered');
	cmp_ok(status('d', 'retries') - $retries, '<=', 1, '(b) after at most one retry');
	my @msgs = $nats->messages('D');
	is_deeply([ Nats::problems(\@msgs, 'd') ], [], '(b) every change once, in commit order');
	my %ids = map { $_->{headers}{'Nats-Msg-Id'} => 1 } @msgs;
	is(scalar(grep { $ids{$_} } @a), 0, '(b) nothing acknowledged before the purge is written again');
	is_deeply([ sort { $a <=> $b } map { $_->{json}{new}{id} } @msgs ], [ $first + 3 .. $n ],
		'(b) the changes after the purge are in the stream');
}

# (c) another writer's messages
{
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('f', 'pub', '" . $nats->url('F', 'subject_prefix=f.p')
		  . "', http_timeout_ms => 3000)");
	insert_txn(1);
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'f'", 120),
		'(c) a stream taking subjects outside the prefix: the pipeline halts');
	like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'f'"),
		qr/the NATS stream takes subjects outside the pipeline's prefix/, '(c) the halt says why');
	is(scalar($nats->messages('F')), 0, '(c) nothing was published into it');

	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('g', 'pub', '" . $nats->url('G', 'subject_prefix=g.p')
		  . "', http_timeout_ms => 3000)");
	my $lsn = insert_txn(1);
	ok(poll("SELECT replicant.await_delivered('g', '$lsn', 1000)", 120), '(c) delivered');
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $file = "$dir/foreign";
	PostgreSQL::Test::Utils::append_to_file($file, "S g.p.other.x\nD 7\nforeign\n");
	$nats->tool_ok('publish', 'G', $file, 1);
	insert_txn(5);
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'g'", 120),
		'(c) a change stored without the refused one before it: the pipeline halts');
	like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'g'"),
		qr/another writer's message took the place of a change the NATS stream refused/,
		'(c) the halt says why');
}

done_testing();
