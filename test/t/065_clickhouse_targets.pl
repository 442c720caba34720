# format => 'clickhouse' names each target after its table, without the
# schema: create_pipeline and alter_pipeline refuse two published tables of
# one name, leaving nothing behind.  sink_ddl prints only the columns the
# publications deliver (PostgreSQL 15's column lists).  No ClickHouse server
# is needed: nothing here is delivered.
#
# versions: all (column lists)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('targets');
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE SCHEMA sales;
CREATE SCHEMA archive;
CREATE TABLE sales.orders (id int PRIMARY KEY, total numeric);
CREATE TABLE archive.orders (id int PRIMARY KEY, total numeric);
CREATE TABLE people (id int PRIMARY KEY, name text, secret text, age int);
CREATE PUBLICATION pub_both FOR TABLE sales.orders, archive.orders;
CREATE PUBLICATION pub_sales FOR TABLE sales.orders;
CREATE PUBLICATION pub_archive FOR TABLE archive.orders;
CREATE PUBLICATION pub_people FOR TABLE people (id, name, age);
});
my $url = 'http://127.0.0.1:9/';

my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('both', ARRAY['pub_both'], '$url', format => 'clickhouse')");
isnt($ret, 0, 'create_pipeline refuses two published tables of one name');
like($stderr, qr/ERROR:  tables "sales\.orders" and "archive\.orders" would both go to ClickHouse table `orders`/,
	'... naming both tables and the target');
like($stderr, qr/HINT:  Publish only one of them to this pipeline\./, '... with a hint');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.pipelines WHERE name = 'both'"), '0',
	'... and leaves no pipeline');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name ~ '^replicant[0-9]*_both\$'"), '0',
	'... and no slot');

($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('split', ARRAY['pub_sales', 'pub_archive'], '$url', format => 'clickhouse')");
isnt($ret, 0, 'the pair from two publications is refused too');

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch', ARRAY['pub_sales'], '$url', format => 'clickhouse')");
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.alter_pipeline('ch', publication => ARRAY['pub_sales', 'pub_archive'])");
isnt($ret, 0, 'alter_pipeline refuses a publication that brings a second table of the name');
like($stderr, qr/would both go to ClickHouse table `orders`/, '... naming the target');
is($node->safe_psql('postgres', "SELECT publications FROM replicant.pipelines WHERE name = 'ch'"),
	'{pub_sales}', '... and leaves the pipeline as it was');

# A publication change brings the pair later: the stream halts on the first
# change of either table, before delivering it, naming both and no value.
$node->safe_psql('postgres', q{
ALTER PUBLICATION pub_sales ADD TABLE archive.orders;
BEGIN;
INSERT INTO sales.orders VALUES (1, 1234.5);
INSERT INTO archive.orders VALUES (1, 6789.5);
COMMIT;
});
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch'"),
	'a publication change that brings a second table of the name halts the stream');
my $last_error = $node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch'");
like($last_error, qr/^tables "sales\.orders" and "archive\.orders" both go to ClickHouse table `orders`/,
	'... naming both tables');
unlike($last_error, qr/1234|6789/, '... and no value');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ch')");

# Only the newly published table changes, in a worker that never saw the
# other one change: the catalog, not the changes seen, says the pair exists.
$node->safe_psql('postgres', q{
ALTER PUBLICATION pub_sales DROP TABLE archive.orders;
CREATE PUBLICATION pub_sales_only FOR TABLE sales.orders;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch_late', ARRAY['pub_sales_only'], '$url', format => 'clickhouse')");
ok(ReplicantTest::poll($node,
		"SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'ch_late'"),
	'the pipeline streams');
$node->safe_psql('postgres', q{
ALTER PUBLICATION pub_sales_only ADD TABLE archive.orders;
INSERT INTO archive.orders VALUES (2, 4321.5);
});
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch_late'"),
	'a change of only the newly published table of the name halts too');
$last_error = $node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch_late'");
like($last_error, qr/^tables "archive\.orders" and "sales\.orders" both go to ClickHouse table `orders`/,
	'... naming both tables');
unlike($last_error, qr/4321/, '... and no value');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ch_late')");

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('plain', ARRAY['pub_both'], '$url')");
pass('format replicant names tables with their schema: the pair is fine');
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.alter_pipeline('plain', format => 'clickhouse')");
isnt($ret, 0, 'alter_pipeline refuses switching such a pipeline to format clickhouse');
is($node->safe_psql('postgres',
		"SELECT d.format FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id"
		  . " WHERE p.name = 'plain'"),
	'replicant', '... and keeps its format');

# Column lists: only the published columns get a target column.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('people', ARRAY['pub_people'], '$url', format => 'clickhouse')");
my $ddl = $node->safe_psql('postgres', "SELECT replicant.sink_ddl('people')");
like($ddl, qr/^CREATE TABLE `people` \(\n  `id` Int32,\n  `name` Nullable\(String\),\n  `age` Nullable\(Int32\),\n  _version UInt64,\n  _deleted UInt8\n\) ENGINE = ReplacingMergeTree\(_version\) ORDER BY \(`id`\)$/,
	'sink_ddl prints only the columns the publication lists');
unlike($ddl, qr/secret/, '... not the unpublished one');

# Keys are made of published columns only (as the stream's "key"): a list
# that leaves out a column of the replica identity leaves the table without
# a key (insert-only); under REPLICA IDENTITY FULL without a primary key the
# published columns are the key.
$node->safe_psql('postgres', q{
CREATE TABLE u (email text PRIMARY KEY, plan text);
CREATE PUBLICATION pub_u FOR TABLE u (plan) WITH (publish = 'insert');
CREATE TABLE audit (who text NOT NULL, action text NOT NULL, secret text NOT NULL);
ALTER TABLE audit REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_audit FOR TABLE audit (who, action) WITH (publish = 'insert');
CREATE TABLE gfull (a int NOT NULL, b text NOT NULL, g text GENERATED ALWAYS AS (b || 'x') STORED);
ALTER TABLE gfull REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_gfull FOR TABLE gfull;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('keys', ARRAY['pub_u', 'pub_audit', 'pub_gfull'], '$url', format => 'clickhouse')");
my %ddl = map { /^CREATE TABLE `(\w+)`/ ? ($1 => $_) : () }
  split /\n(?=CREATE TABLE)/, $node->safe_psql('postgres', "SELECT replicant.sink_ddl('keys')");
is($ddl{u}, "CREATE TABLE `u` (\n  `plan` Nullable(String),\n  _version UInt64,\n  _deleted UInt8\n) ENGINE = MergeTree ORDER BY tuple()",
	'sink_ddl: a list without the key column: no key, insert-only, the key column left out');
is($ddl{audit}, "CREATE TABLE `audit` (\n  `who` String,\n  `action` String,\n  _version UInt64,\n  _deleted UInt8\n) ENGINE = MergeTree ORDER BY tuple()",
	'sink_ddl: REPLICA IDENTITY FULL with a list: no key, the unlisted column left out');
is($ddl{gfull}, "CREATE TABLE `gfull` (\n  `a` Int32,\n  `b` String,\n  _version UInt64,\n  _deleted UInt8\n) ENGINE = ReplacingMergeTree(_version) ORDER BY (`a`, `b`)",
	'sink_ddl: REPLICA IDENTITY FULL without a list: the published columns are the key');

done_testing();
