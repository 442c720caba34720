# Row filters (CREATE PUBLICATION ... FOR TABLE t WHERE (...)) deliver what a
# PostgreSQL subscriber of the same publications receives: the scenarios of
# PostgreSQL's src/test/subscription/t/028_row_filter.pl, with its expected
# rows, on the snapshot (initial copy) and the stream.  Plus: an update that
# moves a row into the filter arrives as an insert with its TOAST values
# whole (or halts when the WAL lacks them), and a filter that errors halts
# with a value-free reason.
#
# versions: all (row filters)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('rowfilter');
my $sink = ReplicantTest::start_sink();

# Waits until the sink's rows of $table are the source rows matching $where
# (of the table alone, not its inheritance children).
sub sink_has
{
	my ($db, $table, $where, $name) = @_;
	my $expected = ReplicantTest::source_rows($node, $db,
		"(SELECT * FROM ONLY $table WHERE $where)");
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $sunk;
	while (1)
	{
		$sunk = $sink->dump($table =~ /\./ ? $table : "public.$table");
		last if $sunk eq $expected || time() > $deadline;
		usleep(200_000);
	}
	is($sunk, $expected, $name);
}

sub state_of
{
	my ($db, $pipeline) = @_;
	return $node->safe_psql($db,
		"SELECT state || '|' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$pipeline'");
}

# --- FOR ALL TABLES beside a filtered publication: no filter at all.
$node->safe_psql('postgres', 'CREATE DATABASE forall');
$node->safe_psql('forall', q{
CREATE EXTENSION replicant;
CREATE TABLE tab_rf_x (x int PRIMARY KEY);
INSERT INTO tab_rf_x (x) VALUES (0), (5), (10), (15), (20);
CREATE PUBLICATION tap_pub_x FOR TABLE tab_rf_x WHERE (x > 10);
CREATE PUBLICATION tap_pub_forall FOR ALL TABLES;
});
$node->safe_psql('forall',
	"SELECT replicant.create_pipeline('forall', '{tap_pub_x,tap_pub_forall}'::text[], '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('forall', 'INSERT INTO tab_rf_x (x) VALUES (-99), (99)');
sink_has('forall', 'tab_rf_x', 'true',
	'FOR ALL TABLES: snapshot and stream unfiltered (5 + 2 rows)');
$node->safe_psql('forall', "SELECT replicant.drop_pipeline('forall')");

# --- TABLES IN SCHEMA: its tables unfiltered even beside a FOR TABLE WHERE in
# the same publication; a partition in another schema keeps its filter.
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE SCHEMA schema_rf_x;
CREATE TABLE schema_rf_x.tab_rf_x (x int PRIMARY KEY);
CREATE TABLE schema_rf_x.tab_rf_partitioned (x int PRIMARY KEY) PARTITION BY RANGE (x);
CREATE TABLE public.tab_rf_partition (LIKE schema_rf_x.tab_rf_partitioned);
ALTER TABLE schema_rf_x.tab_rf_partitioned ATTACH PARTITION public.tab_rf_partition DEFAULT;
INSERT INTO schema_rf_x.tab_rf_x (x) VALUES (0), (5), (10), (15), (20);
INSERT INTO schema_rf_x.tab_rf_partitioned (x) VALUES (1), (20);
CREATE PUBLICATION tap_pub_sx FOR TABLE schema_rf_x.tab_rf_x WHERE (x > 10);
CREATE PUBLICATION tap_pub_allinschema FOR TABLES IN SCHEMA schema_rf_x, TABLE schema_rf_x.tab_rf_x WHERE (x > 10);
ALTER PUBLICATION tap_pub_allinschema ADD TABLE public.tab_rf_partition WHERE (x > 10);
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('inschema', '{tap_pub_sx,tap_pub_allinschema}'::text[], '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('postgres', q{
INSERT INTO schema_rf_x.tab_rf_x (x) VALUES (-99), (99);
INSERT INTO schema_rf_x.tab_rf_partitioned (x) VALUES (5), (25);
});
sink_has('postgres', 'schema_rf_x.tab_rf_x', 'true',
	'TABLES IN SCHEMA: not filtered (7 rows)');
sink_has('postgres', 'tab_rf_partition', 'x IN (20, 25)',
	'partition in another schema: filtered (20, 25)');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('inschema')");
$node->safe_psql('postgres', q{
DROP PUBLICATION tap_pub_sx, tap_pub_allinschema;
DROP TABLE public.tab_rf_partition, schema_rf_x.tab_rf_partitioned, schema_rf_x.tab_rf_x;
DROP SCHEMA schema_rf_x;
});

# --- FOR TABLE with row filters (partitions published under their own names).
$node->safe_psql('postgres', q{
CREATE TABLE tab_rowfilter_1 (a int PRIMARY KEY, b text);
ALTER TABLE tab_rowfilter_1 REPLICA IDENTITY FULL;
CREATE TABLE tab_rowfilter_2 (c int PRIMARY KEY);
CREATE TABLE tab_rowfilter_3 (a int PRIMARY KEY, b boolean);
CREATE TABLE tab_rowfilter_4 (c int PRIMARY KEY);
CREATE TABLE tab_rowfilter_partitioned (a int PRIMARY KEY, b integer) PARTITION BY RANGE (a);
CREATE TABLE tab_rowfilter_less_10k (LIKE tab_rowfilter_partitioned);
ALTER TABLE tab_rowfilter_partitioned ATTACH PARTITION tab_rowfilter_less_10k FOR VALUES FROM (MINVALUE) TO (10000);
CREATE TABLE tab_rowfilter_greater_10k (LIKE tab_rowfilter_partitioned);
ALTER TABLE tab_rowfilter_partitioned ATTACH PARTITION tab_rowfilter_greater_10k FOR VALUES FROM (10000) TO (MAXVALUE);
CREATE TABLE tab_rowfilter_partitioned_2 (a int PRIMARY KEY, b integer) PARTITION BY RANGE (a);
CREATE TABLE tab_rowfilter_partition (LIKE tab_rowfilter_partitioned_2);
ALTER TABLE tab_rowfilter_partitioned_2 ATTACH PARTITION tab_rowfilter_partition DEFAULT;
CREATE TABLE tab_rowfilter_toast (a text NOT NULL, b text NOT NULL);
ALTER TABLE tab_rowfilter_toast ALTER COLUMN a SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX tab_rowfilter_toast_ri_index ON tab_rowfilter_toast (a, b);
ALTER TABLE tab_rowfilter_toast REPLICA IDENTITY USING INDEX tab_rowfilter_toast_ri_index;
CREATE TABLE tab_rowfilter_inherited (a int);
CREATE TABLE tab_rowfilter_child (b text) INHERITS (tab_rowfilter_inherited);
ALTER TABLE tab_rowfilter_inherited REPLICA IDENTITY FULL;
ALTER TABLE tab_rowfilter_child REPLICA IDENTITY FULL;

CREATE PUBLICATION tap_pub_1 FOR TABLE tab_rowfilter_1 WHERE (a > 1000 AND b <> 'filtered');
ALTER PUBLICATION tap_pub_1 ADD TABLE tab_rowfilter_2 WHERE (c % 7 = 0);
ALTER PUBLICATION tap_pub_1 SET TABLE tab_rowfilter_1 WHERE (a > 1000 AND b <> 'filtered'),
  tab_rowfilter_2 WHERE (c % 2 = 0), tab_rowfilter_3;
CREATE PUBLICATION tap_pub_2 FOR TABLE tab_rowfilter_2 WHERE (c % 3 = 0);
CREATE PUBLICATION tap_pub_3 FOR TABLE tab_rowfilter_partitioned;
ALTER PUBLICATION tap_pub_3 ADD TABLE tab_rowfilter_less_10k WHERE (a < 6000);
CREATE PUBLICATION tap_pub_not_used FOR TABLE tab_rowfilter_1 WHERE (a < 0);
CREATE PUBLICATION tap_pub_4a FOR TABLE tab_rowfilter_4 WHERE (c % 2 = 0);
CREATE PUBLICATION tap_pub_4b FOR TABLE tab_rowfilter_4;
CREATE PUBLICATION tap_pub_5a FOR TABLE tab_rowfilter_partitioned_2;
CREATE PUBLICATION tap_pub_5b FOR TABLE tab_rowfilter_partition WHERE (a > 10);
CREATE PUBLICATION tap_pub_toast FOR TABLE tab_rowfilter_toast WHERE (a = repeat('1234567890', 200) AND b < '10');
CREATE PUBLICATION tap_pub_inherits FOR TABLE tab_rowfilter_inherited WHERE (a > 15);

INSERT INTO tab_rowfilter_1 (a, b) VALUES (1, 'not replicated');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1500, 'filtered');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1980, 'not filtered');
INSERT INTO tab_rowfilter_1 (a, b) SELECT x, 'test ' || x FROM generate_series(990, 1002) x;
INSERT INTO tab_rowfilter_2 (c) SELECT generate_series(1, 20);
INSERT INTO tab_rowfilter_3 (a, b) SELECT x, (x % 3 = 0) FROM generate_series(1, 10) x;
INSERT INTO tab_rowfilter_4 (c) SELECT generate_series(1, 10);
INSERT INTO tab_rowfilter_partitioned (a, b) VALUES (1, 100), (7000, 101), (15000, 102), (5500, 300);
INSERT INTO tab_rowfilter_less_10k (a, b) VALUES (2, 200), (6005, 201);
INSERT INTO tab_rowfilter_greater_10k (a, b) VALUES (16000, 103);
INSERT INTO tab_rowfilter_partitioned_2 (a, b) VALUES (1, 1), (20, 20);
INSERT INTO tab_rowfilter_toast (a, b) VALUES (repeat('1234567890', 200), '1234567890');
INSERT INTO tab_rowfilter_inherited (a) VALUES (10), (20);
INSERT INTO tab_rowfilter_child (a, b) VALUES (0, '0'), (30, '30'), (40, '40');
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('rf', '{tap_pub_1,tap_pub_2,tap_pub_3,tap_pub_4a,tap_pub_4b,tap_pub_5a,tap_pub_5b,tap_pub_toast,tap_pub_inherits}'::text[], '$sink->{url}', snapshot => 'initial')");

# The initial copy, as table synchronization filters it.
sink_has('postgres', 'tab_rowfilter_1', 'a IN (1001, 1002, 1980)',
	'snapshot tab_rowfilter_1: (a > 1000 AND b <> filtered)');
sink_has('postgres', 'tab_rowfilter_2', 'c % 2 = 0 OR c % 3 = 0',
	'snapshot tab_rowfilter_2: filters of two publications ORed (13 rows)');
sink_has('postgres', 'tab_rowfilter_4', 'true',
	'snapshot tab_rowfilter_4: one publication without a filter, no filter');
sink_has('postgres', 'tab_rowfilter_3', 'true', 'snapshot tab_rowfilter_3: no filter');
sink_has('postgres', 'tab_rowfilter_less_10k', 'a IN (1, 2, 5500)',
	'snapshot tab_rowfilter_less_10k: the partition\'s own filter');
sink_has('postgres', 'tab_rowfilter_greater_10k', 'a IN (15000, 16000)',
	'snapshot tab_rowfilter_greater_10k: no filter');
sink_has('postgres', 'tab_rowfilter_partition', 'true',
	'snapshot tab_rowfilter_partition: the parent\'s publication has no filter');
sink_has('postgres', 'tab_rowfilter_toast', 'false',
	'snapshot tab_rowfilter_toast: no row matches');
sink_has('postgres', 'tab_rowfilter_inherited', 'a = 20',
	'snapshot tab_rowfilter_inherited: (a > 15)');
sink_has('postgres', 'tab_rowfilter_child', 'a IN (30, 40)',
	'snapshot tab_rowfilter_child: the parent\'s filter');

# The stream.
$node->safe_psql('postgres', q{
INSERT INTO tab_rowfilter_1 (a, b) VALUES (800, 'test 800');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1600, 'test 1600');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1601, 'test 1601');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1602, 'filtered');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1700, 'test 1700');
UPDATE tab_rowfilter_1 SET b = NULL WHERE a = 1600;
UPDATE tab_rowfilter_1 SET b = 'test 1601 updated' WHERE a = 1601;
UPDATE tab_rowfilter_1 SET b = 'test 1602 updated' WHERE a = 1602;
DELETE FROM tab_rowfilter_1 WHERE a = 1700;
INSERT INTO tab_rowfilter_2 (c) VALUES (21), (22), (23), (24), (25);
INSERT INTO tab_rowfilter_4 (c) VALUES (0), (11), (12);
INSERT INTO tab_rowfilter_inherited (a) VALUES (14), (16);
INSERT INTO tab_rowfilter_child (a, b) VALUES (13, '13'), (17, '17');
INSERT INTO tab_rowfilter_partitioned (a, b) VALUES (4000, 400), (4001, 401), (4002, 402);
INSERT INTO tab_rowfilter_less_10k (a, b) VALUES (4500, 450), (5600, 123), (6500, 650);
INSERT INTO tab_rowfilter_greater_10k (a, b) VALUES (14000, 1950);
UPDATE tab_rowfilter_less_10k SET b = 30 WHERE a = 4001;
DELETE FROM tab_rowfilter_less_10k WHERE a = 4002;
});
sink_has('postgres', 'tab_rowfilter_2', '(c % 2 = 0 OR c % 3 = 0)',
	'stream tab_rowfilter_2: 16 rows, 2 to 24');
sink_has('postgres', 'tab_rowfilter_4', 'true', 'stream tab_rowfilter_4: 13 rows, 0 to 12');
sink_has('postgres', 'tab_rowfilter_1', 'a IN (1001, 1002, 1601, 1602, 1980)',
	'stream tab_rowfilter_1: an update out of the filter deletes, into it inserts');
sink_has('postgres', 'tab_rowfilter_inherited', 'a IN (16, 20)',
	'stream tab_rowfilter_inherited');
sink_has('postgres', 'tab_rowfilter_child', 'a IN (17, 30, 40)',
	'stream tab_rowfilter_child');
sink_has('postgres', 'tab_rowfilter_less_10k', 'a IN (1, 2, 4000, 4001, 4500, 5500, 5600)',
	'stream tab_rowfilter_less_10k: (a < 6000)');
sink_has('postgres', 'tab_rowfilter_greater_10k', 'true',
	'stream tab_rowfilter_greater_10k: no filter');

# An update of the non-TOASTed key column moves the row into the filter: an
# insert with the TOASTed column whole, taken from the old key.
$node->safe_psql('postgres', "UPDATE tab_rowfilter_toast SET b = '1'");
sink_has('postgres', 'tab_rowfilter_toast', 'true',
	'stream tab_rowfilter_toast: an update into the filter inserts the whole row');
my $rows = $sink->dump('public.tab_rowfilter_toast');
like($rows, qr/"a":"(1234567890){200}"/, 'the TOASTed key column arrived whole');
is(state_of('postgres', 'rf'), 'streaming|', 'pipeline rf still streaming');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rf')");

# --- Updates into the filter that carry unchanged TOAST columns: under
# REPLICA IDENTITY FULL the old row has them; with a key-only old row the WAL
# lacks them, and the pipeline halts rather than insert a partial row.
$node->safe_psql('postgres', q{
CREATE TABLE toast_full (id int PRIMARY KEY, big text);
ALTER TABLE toast_full ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE toast_full REPLICA IDENTITY FULL;
CREATE TABLE toast_key (id int PRIMARY KEY, big text);
ALTER TABLE toast_key ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE PUBLICATION pub_toast_full FOR TABLE toast_full WHERE (id > 100);
CREATE PUBLICATION pub_toast_key FOR TABLE toast_key WHERE (id > 100);
INSERT INTO toast_full VALUES (1, repeat('x', 5000)), (2, 'small');
INSERT INTO toast_key VALUES (1, repeat('y', 5000));
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('tf', '{pub_toast_full}'::text[], '$sink->{url}')");
$node->safe_psql('postgres', 'UPDATE toast_full SET id = id + 100');
sink_has('postgres', 'toast_full', 'true',
	'REPLICA IDENTITY FULL: the insert made of the update carries the unchanged TOAST value');
$node->safe_psql('postgres', 'UPDATE toast_full SET id = id - 100 WHERE id = 102');
sink_has('postgres', 'toast_full', 'id > 100', 'an update out of the filter deletes');

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('tk', '{pub_toast_key}'::text[], '$sink->{url}')");
$node->safe_psql('postgres', 'UPDATE toast_key SET id = 101');
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'tk'"),
	'key-only old row: the pipeline halts');
like(state_of('postgres', 'tk'),
	qr/^halted\|an update moved a row of table "toast_key" into a row filter, and the WAL lacks the value of its unchanged TOAST column "big"$/,
	'the reason names the table and the column, no value');
is($sink->dump('public.toast_key'), '', 'no partial insert was delivered');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('tk')");
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('tf')");

# --- A filter that errors halts the pipeline, value-free.
$node->safe_psql('postgres', q{
CREATE TABLE div (id int PRIMARY KEY, d int);
CREATE PUBLICATION pub_div FOR TABLE div WHERE (100 / d > 1);
INSERT INTO div VALUES (1, 10);
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('div', '{pub_div}'::text[], '$sink->{url}', snapshot => 'initial')");
sink_has('postgres', 'div', 'true', 'a filter that evaluates is applied');
$node->safe_psql('postgres', 'INSERT INTO div VALUES (2, 0)');
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'div'"),
	'a filter that errors halts the pipeline');
is(state_of('postgres', 'div'),
	'halted|the row filter of table "div" failed on a change (error class 22012)',
	'the reason names the table and the error class only');

done_testing();
