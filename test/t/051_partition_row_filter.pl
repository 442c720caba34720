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
done_testing();
