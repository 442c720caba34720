# NATS: pipelines of the same name in two databases (or on two servers)
# on one stream with the same subject prefix (review rv-nats 190).  The
# "last message this pipeline wrote" lookup took db2's message as db1's own
# mark (its Nats-Msg-Id starts "p:"), so db1's backlog, committed before
# db2's change, was skipped and checkpointed: lost from the stream.  Every
# message now carries Replicant-Source (<system identifier>/<database oid>);
# a pipeline whose prefix's last message is another source's halts,
# value-free, and writes nothing.
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
$nats->create_stream('S', 'replicant.p.>');

my $node = ReplicantTest::new_node('rv_nats_two_db');
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('postgres', 'CREATE DATABASE db2');
foreach my $db ('db1', 'db2')
{
	$node->safe_psql($db, q{
		CREATE EXTENSION replicant;
		CREATE TABLE t (id int PRIMARY KEY, v text);
		CREATE PUBLICATION pub FOR TABLE t;
	});
}
sub poll { my ($db, $sql, $t) = @_; return ReplicantTest::poll($node, $sql, $t, $db); }

$node->safe_psql('db1', "SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "')");
$node->safe_psql('db1', "INSERT INTO t VALUES (1, 'db1 first')");
ok(poll('db1', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120),
	'db1: first row delivered');

# db1's pipeline stops for a while (maintenance); its table changes meanwhile
$node->safe_psql('db1', "SELECT replicant.disable_pipeline('p')");
ok(poll('db1', "SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'p'", 60),
	'db1: worker stopped');
$node->safe_psql('db1', "INSERT INTO t VALUES (2, 'db1 backlog')");
$node->safe_psql('db1', "INSERT INTO t VALUES (3, 'db1 backlog')");

# db2's pipeline "p", same stream, default prefix; it publishes one change
$node->safe_psql('db2', "SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "')");
$node->safe_psql('db2', "INSERT INTO t VALUES (100, 'db2')");
ok(poll('db2', "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'", 120),
	'db2: halts, the last message under its prefix is db1\'s');
like($node->safe_psql('db2', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'p'"),
	qr/last message under the NATS subject prefix was written by another pipeline, destination or database/,
	'db2: the halt says why');

# db1 resumes
$node->safe_psql('db1', "SELECT replicant.enable_pipeline('p')");
ok(poll('db1', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120),
	'db1: reports its backlog delivered');

my @msgs = $nats->messages('S');
my @db1 = map { $_->{json}{new}{v} } grep { ($_->{json}{new}{v} // '') =~ /^db1/ } @msgs;
note "stream: " . join(', ', map { "$_->{seq} $_->{headers}{'Nats-Msg-Id'} $_->{json}{new}{id}" } @msgs);
is(scalar(@db1), 3, 'all three changes of db1 are in the stream');
is(scalar(grep { ($_->{json}{new}{v} // '') eq 'db2' } @msgs), 0, 'nothing of db2 is in the stream');
my $sysid = $node->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $db1oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'db1'");
is_deeply([ grep { ($_->{headers}{'Replicant-Source'} // '') ne "$sysid/$db1oid" } @msgs ], [],
	'every message says it comes from db1 (Replicant-Source)');
done_testing();
