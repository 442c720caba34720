# NATS: a logical message whose prefix makes the subject longer than the
# server's max_control_line (4096 bytes) (review rv-nats 191, p).  Any role
# can emit one; the server closed the connection at every attempt and the
# pipeline retried for ever, its later changes stuck behind it.  A message
# prefix longer than 128 bytes is now written as the token of its first 64
# bytes, "%H" and the SHA-256 of the whole prefix (hex): the subject stays
# short, distinct per prefix, and the body keeps the whole prefix.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use Digest::SHA qw(sha256_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('S', 'replicant.p.>');

my $node = ReplicantTest::new_node('nats_long_subject');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
sub poll { return ReplicantTest::poll($node, @_); }

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "', messages => true, http_timeout_ms => 3000)");
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'a')");
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'delivered');

# messages with a 5000-byte and a 129-byte prefix (any role may emit them)
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, repeat('x', 5000), 'hello')");
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(true, repeat('y', 129), 'world')");
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(true, repeat('z', 128), 'short')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'b')");
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120),
	'the messages and the next change are delivered');
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'p'"), 'streaming',
	'the pipeline streams');

my @msgs = $nats->messages('S');
my %subjects = map { (($_->{json}{prefix} // '') => $_->{subject}) } @msgs;
is($subjects{ 'x' x 5000 }, 'replicant.p._messages.' . ('x' x 64) . '%H' . sha256_hex('x' x 5000),
	'a 5000-byte prefix: 64 bytes and the hash');
is($subjects{ 'y' x 129 }, 'replicant.p._messages.' . ('y' x 64) . '%H' . sha256_hex('y' x 129),
	'a 129-byte prefix: 64 bytes and the hash');
is($subjects{ 'z' x 128 }, 'replicant.p._messages.' . ('z' x 128), 'a 128-byte prefix in full');
is_deeply([ Nats::problems(\@msgs, 'p') ], [], 'every change and message once, in order');
done_testing();
