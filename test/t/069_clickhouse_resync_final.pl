# A ClickHouse target that is a plain MergeTree (the insert-only table
# create_tables made for a key-less table, or a user's own) whose source
# table has a key by the time of a resync: the sweep's SELECT ... FINAL
# fails on it with an error no retry fixes (ILLEGAL_FINAL, code 181), so
# the resync halts with that code instead of retrying for ever.  (Found by
# an outside review of the ClickHouse resync.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ClickHouse;
use ReplicantTest;

ClickHouse::require_server();
my $ch = ClickHouse->start;
$ch->query_ok('CREATE DATABASE replica');
my $sink_url = "$ch->{url}?database=replica";

my $node = ReplicantTest::new_node('fin');
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t (id int NOT NULL, v text);
CREATE PUBLICATION pub FOR TABLE t;
INSERT INTO t SELECT g, 'seed' FROM generate_series(1, 10) g;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch', ARRAY['pub'], '$sink_url', snapshot => 'initial',"
	  . " format => 'clickhouse', create_tables => true,"
	  . " http_timeout_ms => 5000, connect_timeout_ms => 500)");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ch'"),
	'streaming');
note('target: ' . $ch->query('SHOW CREATE TABLE replica.t'));
$node->safe_psql('postgres', 'ALTER TABLE t ADD PRIMARY KEY (id)');
$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('ch')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch'", 120),
	'the resync halts on an error no retry fixes');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch'"),
	qr/error code 181/, 'last_error names ClickHouse code 181 (ILLEGAL_FINAL)');
is($node->safe_psql('postgres', "SELECT retries FROM replicant.status WHERE pipeline = 'ch'"),
	'0', 'without retrying it');
done_testing();
