# The worker decodes inside a transaction of its own, so that the reorder
# buffer replays each decoded transaction in a cheaper subtransaction.  That
# transaction must hold no snapshot between the transactions it replays: a
# catalog snapshot taken during a replay (the first one after the caches were
# reset reloads nailed catalogs) would otherwise stay for the rest of the
# read and hold back vacuum.  decode:hold stops the worker right after it
# decoded a transaction, until the setting changes.
#
# versions: all (the reorder buffer and catalog snapshots while decoding)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('horizon');
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
	SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}');
});
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'the pipeline streams');

# A worker started afresh resets its caches before it first decodes.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET replicant.fault_point = 'decode:hold';
	SELECT pg_reload_conf();
	SELECT replicant.disable_pipeline('p');
});
ok(ReplicantTest::poll($node,
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"),
	'the worker stopped');
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'a new worker streams');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'one')");
ok(defined eval { $node->wait_for_log(qr/fault point "decode" reached, holding/, $offset) },
	'the worker stopped after decoding the transaction');
my ($in_xact, $xmin) = split /\|/, $node->safe_psql('postgres',
	"SELECT xact_start IS NOT NULL, coalesce(backend_xmin::text, 'none')"
	  . " FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'");
is($in_xact, 't', 'premise: the worker holds inside the decoding transaction');
is($xmin, 'none', 'between decoded transactions the worker holds no snapshot');

$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();");
ok(defined eval { $node->wait_for_log(qr/fault point "decode" released/, $offset) },
	'the worker went on once the fault point was reset');
$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'two')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.t']), 'the sink has both rows');
my $counts = $sink->deliveries('public.t');
is_deeply([ sort values %$counts ], [ 1, 1 ], '... each delivered once');

$node->stop;
done_testing();
