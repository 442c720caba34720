# Row filters on partitioned tables, after PostgreSQL's
# src/test/subscription/t/028_row_filter.pl (the rows a subscriber ends up
# with are carried over as facts).
#
#   publish_via_partition_root = false: each partition's own filter decides
#     (PostgreSQL refuses a filter on the partitioned table itself then); a
#     partition without a filter of its own delivers every row
#   publish_via_partition_root = true: the root's filter decides for every
#     partition (other column orders too), a partition's own filter is not
#     used; updates are transformed against it (old and new match: update;
#     only new: insert; only old: delete), a row moved to another partition
#     too; snapshot and stream alike
#   a partition in another schema than its root (FOR TABLES IN SCHEMA of
#     the partition's schema, TABLE root WHERE (...), published via the
#     root): the root's filter decides, as pgoutput
#     decides (the publication's schemas are compared with the schema of the
#     relation a change is published as: pgoutput_row_filter_init takes
#     get_rel_namespace(entry->publish_as_relid), 15 to 18 alike), and as
#     table synchronization copies the root; a subscriber of the same
#     publication shows it, against the snapshot, the stream and a backfill
#
# versions: all (partition roots and row filters)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('rowfilter_partitions');

sub query { return $node->safe_psql('postgres', @_); }
sub poll { return ReplicantTest::poll($node, @_); }

sub canon_rows
{
	return ReplicantTest::run_sink_script(['canon'], join("\n", @_) . "\n");
}

sub delivered
{
	my ($pipeline) = @_;
	ok(poll("SELECT replicant.await_delivered('$pipeline', pg_current_wal_lsn(), 60000)"),
		"$pipeline: delivered up to now");
}

query(q{
CREATE EXTENSION replicant;

CREATE TABLE rp (a int PRIMARY KEY, b int) PARTITION BY RANGE (a);
CREATE TABLE rp_less_10k PARTITION OF rp FOR VALUES FROM (MINVALUE) TO (10000);
CREATE TABLE rp_greater_10k PARTITION OF rp FOR VALUES FROM (10000) TO (MAXVALUE);
CREATE PUBLICATION pub_leaf_filters FOR TABLE rp, rp_less_10k WHERE (a < 6000);
INSERT INTO rp VALUES (1, 100), (7000, 101), (15000, 102), (5500, 300);
INSERT INTO rp_less_10k VALUES (2, 200), (6005, 201);
INSERT INTO rp_greater_10k VALUES (16000, 103);

CREATE TABLE vr (a int PRIMARY KEY, b int) PARTITION BY RANGE (a);
CREATE TABLE vr_1 (b int, a int NOT NULL);
ALTER TABLE vr ATTACH PARTITION vr_1 FOR VALUES FROM (0) TO (1000);
CREATE TABLE vr_2 PARTITION OF vr FOR VALUES FROM (1000) TO (2000);
CREATE PUBLICATION pub_via_root FOR TABLE vr WHERE (a % 2 = 0), vr_2 WHERE (a > 1500)
  WITH (publish_via_partition_root = true);
INSERT INTO vr VALUES (1, 1), (2, 2), (1001, 1001), (1002, 1002), (1600, 1600), (1601, 1601);
});

my $sink_leaf = ReplicantTest::start_sink(name => 'sink_leaf');
my $sink_root = ReplicantTest::start_sink(name => 'sink_root', keep_bodies => 1);
query("SELECT replicant.create_pipeline('p_leaf', 'pub_leaf_filters', '$sink_leaf->{url}', snapshot => 'initial')");
query("SELECT replicant.create_pipeline('p_root', 'pub_via_root', '$sink_root->{url}', snapshot => 'initial')");
poll("SELECT count(*) = 2 FROM replicant.status WHERE state IN ('streaming', 'halted')");
unless (is(query("SELECT string_agg(state, ',') FROM replicant.status"), 'streaming,streaming',
		'both pipelines stream after their snapshots'))
{
	diag(query("SELECT string_agg(coalesce(last_error, ''), '; ') FROM replicant.status"));
	done_testing();
	exit;
}

# ---- leaf filters: snapshot ---------------------------------------------------------
is($sink_leaf->dump('public.rp_less_10k'),
	canon_rows('{"a":1,"b":100}', '{"a":2,"b":200}', '{"a":5500,"b":300}'),
	'snapshot: rp_less_10k by its own filter (a < 6000)');
is($sink_leaf->dump('public.rp_greater_10k'),
	canon_rows('{"a":15000,"b":102}', '{"a":16000,"b":103}'),
	'snapshot: rp_greater_10k has no filter of its own: every row');
is($sink_leaf->dump('public.rp'), '', 'snapshot: nothing under the root');

# ---- leaf filters: stream -----------------------------------------------------------
query(q{
INSERT INTO rp VALUES (3, 100), (7001, 101), (15001, 102), (5501, 300);
INSERT INTO rp_less_10k VALUES (4, 200), (6006, 201);
INSERT INTO rp_greater_10k VALUES (16001, 103);
});
delivered('p_leaf');
is($sink_leaf->dump('public.rp_less_10k'),
	canon_rows('{"a":1,"b":100}', '{"a":2,"b":200}', '{"a":5500,"b":300}',
		'{"a":3,"b":100}', '{"a":4,"b":200}', '{"a":5501,"b":300}'),
	'stream: rp_less_10k by its own filter');
is($sink_leaf->dump('public.rp_greater_10k'),
	canon_rows('{"a":15000,"b":102}', '{"a":16000,"b":103}', '{"a":15001,"b":102}',
		'{"a":16001,"b":103}'),
	'stream: rp_greater_10k unfiltered');

# ---- the root's filter ----------------------------------------------------------------
my $filtered = '(SELECT a, b FROM vr WHERE a % 2 = 0)';
is($sink_root->dump('public.vr'),
	canon_rows('{"a":2,"b":2}', '{"a":1002,"b":1002}', '{"a":1600,"b":1600}'),
	"snapshot: every partition by the root's filter, none by vr_2's own");
query(q{
INSERT INTO vr VALUES (4, 4), (5, 5), (1004, 1004), (1505, 1505);
UPDATE vr SET a = 7 WHERE a = 4;
UPDATE vr SET a = 6 WHERE a = 5;
UPDATE vr SET a = 1006 WHERE a = 6;
UPDATE vr SET b = -1004 WHERE a = 1004;
UPDATE vr SET b = -1505 WHERE a = 1505;
});
delivered('p_root');
is($sink_root->dump('public.vr'), ReplicantTest::source_rows($node, 'postgres', $filtered),
	"stream: the sink equals SELECT a, b FROM vr WHERE the root's filter");
{
	my @changes = map { @{ $_->{changes} // [] } }
	  map { @{ $_->{body}{transactions} // [] } } @{ $sink_root->bodies };
	my @ops = map { "$_->{op}:" . ($_->{key}{a} // '') } @changes;
	is(join(',', @ops),
		'insert:4,insert:1004,delete:4,insert:6,delete:6,insert:1006,update:1004',
		'stream: inserts, updates and moves transformed against the root filter');
	my %names = map { ("$_->{schema}.$_->{table}" => 1) } @changes;
	is(join(',', keys %names), 'public.vr', 'stream: under the root only');
}

is(query("SELECT string_agg(state, ',') FROM replicant.status"), 'streaming,streaming',
	'nothing halted');
query("SELECT replicant.drop_pipeline('p_leaf')");
query("SELECT replicant.drop_pipeline('p_root')");
# ---- a partition in another schema than its root -------------------------------------
# The leaf xl.leaf is in a schema the publication has whole; its root xr.root
# is listed with a filter.  pgoutput publishes the leaf's changes as
# xr.root, filtered by xr.root's entry (xr is not one of the publication's
# schemas): only rows with v > 10 reach a subscriber.
query(q{
CREATE SCHEMA xl;
CREATE SCHEMA xr;
CREATE TABLE xr.root (id int PRIMARY KEY, v int NOT NULL) PARTITION BY RANGE (id);
CREATE TABLE xl.leaf PARTITION OF xr.root FOR VALUES FROM (0) TO (1000);
CREATE TABLE xr.leaf2 PARTITION OF xr.root FOR VALUES FROM (1000) TO (2000);
INSERT INTO xr.root VALUES (1, 5), (2, 20), (3, 10), (1001, 6), (1002, 30);
-- A filter on an updated table may only use replica identity columns.
ALTER TABLE xr.root REPLICA IDENTITY FULL;
ALTER TABLE xl.leaf REPLICA IDENTITY FULL;
ALTER TABLE xr.leaf2 REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_cross FOR TABLES IN SCHEMA xl, TABLE xr.root WHERE (v > 10)
  WITH (publish_via_partition_root = true);
});
my $sub = ReplicantTest::new_node('cross_schema_subscriber');
$sub->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE SCHEMA xr;
CREATE TABLE xr.root (id int PRIMARY KEY, v int NOT NULL);
});
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION sub_cross CONNECTION '" . $node->connstr . " dbname=postgres' PUBLICATION pub_cross");
ok($sub->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')"),
	'cross schema: the subscriber synchronized');

my $sink_cross = ReplicantTest::start_sink(name => 'sink_cross');
query("SELECT replicant.create_pipeline('p_cross', 'pub_cross', '$sink_cross->{url}', snapshot => 'initial')");
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p_cross'"),
	'cross schema: streaming after the snapshot');
my $filtered_cross = '(SELECT id, v FROM xr.root WHERE v > 10)';
is(ReplicantTest::source_rows($sub, 'postgres', 'xr.root'),
	ReplicantTest::source_rows($node, 'postgres', $filtered_cross),
	'cross schema: pgoutput\'s table synchronization copies only the rows with v > 10');
is($sink_cross->dump('xr.root'), ReplicantTest::source_rows($node, 'postgres', $filtered_cross),
	'viaroot_schema_filter (snapshot): only the rows with v > 10, as the subscriber');

query(q{
INSERT INTO xr.root VALUES (4, 7), (5, 50), (1003, 8), (1004, 40);
UPDATE xr.root SET v = 11 WHERE id = 3;
UPDATE xr.root SET v = 2 WHERE id = 2;
});
delivered('p_cross');
$node->wait_for_catchup('sub_cross');
is(ReplicantTest::source_rows($sub, 'postgres', 'xr.root'),
	ReplicantTest::source_rows($node, 'postgres', $filtered_cross),
	'cross schema: pgoutput delivers only the changes of rows with v > 10');
is($sink_cross->dump('xr.root'), ReplicantTest::source_rows($sub, 'postgres', 'xr.root'),
	'viaroot_schema_filter (stream): the sink equals the subscriber');

my $sink_cross_bf = ReplicantTest::start_sink(name => 'sink_cross_backfill');
query("SELECT replicant.alter_pipeline('p_cross', sink_url => '$sink_cross_bf->{url}')");
my $bf = query("SELECT replicant.backfill('p_cross', 'xl.leaf', mode => 'keyset')");
ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $bf"),
	'cross schema: the backfill of the leaf finishes');
is($sink_cross_bf->dump('xr.root'),
	ReplicantTest::source_rows($node, 'postgres', '(SELECT id, v FROM xl.leaf WHERE v > 10)'),
	'viaroot_schema_filter (backfill): only the leaf\'s rows with v > 10, under the root');
is(query("SELECT state FROM replicant.status WHERE pipeline = 'p_cross'"), 'streaming',
	'cross schema: nothing halted');
query("SELECT replicant.drop_pipeline('p_cross')");
$sub->stop;
done_testing();
