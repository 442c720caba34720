# NATS JetStream destination: a read of the stream that is behind it.
# nats-server 2.9 lets a stream's node restarted a moment ago answer reads
# from the state it had when it stopped (101 (b) met it).  The worst such
# read says the stream is empty while it holds the pipeline's messages: the
# worker must then not publish its next change unchained.  Reproduced
# without timing: the stream is made again, empty; the worker reads it
# (sequence 0, no mark) and holds at fault point "nats_learnt"; the stream
# gets what the read did not show (the pipeline's last message); released,
# the worker's first change expects sequence 0 and is refused, it asks
# again and publishes the transaction behind that message, whole and in
# order.  Unchained, its first change went in, its second was refused and
# its third stored without it: a halt, and a gap in the stream.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('S', 'replicant.p.>', duplicates_ms => 1000);

my $node = ReplicantTest::new_node('nats_stale_read');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "', http_timeout_ms => 3000)");

sub poll { return ReplicantTest::poll($node, @_); }

my $lsn = $node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'v1'); SELECT pg_current_wal_lsn()");
ok(poll("SELECT replicant.await_delivered('p', '$lsn', 1000)", 120), 'the first transaction is delivered');
my $raw = PostgreSQL::Test::Utils::tempdir() . '/raw';
$nats->tool_ok('dumpraw', 'S', $raw);

# the stream again, empty: the worker's next read finds sequence 0 and no
# mark, as from a node restarted from an empty past
$nats->tool_ok('delete', 'S');
$nats->create_stream('S', 'replicant.p.>', duplicates_ms => 1000);
my $offset = -s $node->logfile;
ReplicantTest::set_fault_point($node, 'nats_learnt:hold');
$lsn = $node->safe_psql('postgres',
	"INSERT INTO t SELECT g, 'v' || g FROM generate_series(2, 6) g; SELECT pg_current_wal_lsn()");
$node->wait_for_log(qr/fault point "nats_learnt" reached, holding/, $offset);

# what that read did not show: the pipeline's last message
$nats->tool_ok('publish', 'S', $raw, 1);
ReplicantTest::set_fault_point($node, undef);

ok(poll("SELECT replicant.await_delivered('p', '$lsn', 1000)", 120), 'the transaction after the read is delivered');
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'p'"),
	'streaming', 'the pipeline streams: no halt');
my @msgs = $nats->messages('S');
is_deeply([ Nats::problems(\@msgs, 'p') ], [], 'every change once, in commit order');
is(scalar(@msgs), 6, "the pipeline's last message, then the transaction's five changes");
is_deeply(Nats::table_state(\@msgs, 'public', 't'),
	Nats::source_state($node, 'postgres', 't', ['id']), 't equals the source');

done_testing();
