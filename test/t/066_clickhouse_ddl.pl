# format => 'clickhouse': what replicant.sink_ddl() prints is what the stream
# writes, for every table shape, against the real server (test/ClickHouse.pm):
# each case runs the DDL in ClickHouse, streams into it and compares
# SELECT ... FINAL WHERE _deleted = 0 with the source.
#
#   odd identifiers (a backslash, quotes, a back-quote, a tab, a newline)
#   publish_via_partition_root: one target for the root, not the leaves
#   generated columns (18: publish_generated_columns = stored)
#   column lists that leave out the key, as the key stands today
#
# Then the order a new user takes: sink_ddl(publication text[]) before any
# pipeline exists, create_pipeline(..., enabled => false) with an initial
# snapshot, enable; and create_tables => true, which creates missing targets
# exactly as sink_ddl prints them before the snapshot, leaves an existing
# one as it is, and halts when ClickHouse refuses.
#
# versions: all (publish_via_partition_root, generated columns, column lists)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use ClickHouse;
use ReplicantTest;

ClickHouse::require_server();

my $ch = ClickHouse->start;
$ch->query_ok('CREATE DATABASE replica');
$ch->query_ok('CREATE DATABASE auto');

my $node = ReplicantTest::new_node('chddl');
my $pg18 = $node->safe_psql('postgres', 'SHOW server_version_num') >= 180000;

# Names with what a ClickHouse identifier must escape: a backslash (which
# PostgreSQL's quote_identifier leaves as it is), quotes, a back-quote, a
# tab and a newline.
$node->safe_psql('postgres', "
CREATE EXTENSION replicant;
CREATE TABLE \"odd\\tbl\" (id int PRIMARY KEY, \"x\\\" text, \"a\"\"b\" text, \"t`ick\" text,
    \"Mixed Case\" int, \"tab\there\" text, \"new\nline\" text);
CREATE PUBLICATION pub_odd FOR TABLE \"odd\\tbl\";

CREATE TABLE meas (region text NOT NULL, id int NOT NULL, v int, PRIMARY KEY (region, id))
    PARTITION BY LIST (region);
CREATE TABLE meas_eu PARTITION OF meas FOR VALUES IN ('eu');
CREATE TABLE meas_us (v int, dropme int, id int NOT NULL, region text NOT NULL);
ALTER TABLE meas_us DROP COLUMN dropme;
ALTER TABLE meas ATTACH PARTITION meas_us FOR VALUES IN ('us');
CREATE PUBLICATION pub_root FOR TABLE meas WITH (publish_via_partition_root = true);

CREATE TABLE gen (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED);
CREATE PUBLICATION pub_gen FOR TABLE gen"
	  . ($pg18 ? " WITH (publish_generated_columns = stored)" : '') . ";

CREATE TABLE u (email text PRIMARY KEY, plan text);
CREATE PUBLICATION pub_u FOR TABLE u (plan) WITH (publish = 'insert');
CREATE TABLE audit (who text, action text, secret text);
ALTER TABLE audit REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_audit FOR TABLE audit (who, action) WITH (publish = 'insert');
");

# The statements of a sink_ddl() call.
sub ddl
{
	my ($call) = @_;
	return split /\x01/,
	  $node->safe_psql('postgres', "SELECT string_agg(d, E'\\x01') FROM $call d");
}

sub run_ddl
{
	my ($database, @statements) = @_;
	$ch->query_ok($_, settings => { database => $database }) foreach @statements;
}

# Rows as sorted canonical JSON, the numbers as numbers (as 062 compares
# them): PostgreSQL and ClickHouse sort text and NULLs differently.
sub normalized
{
	my ($rows) = @_;
	foreach my $row (@$rows)
	{
		delete @$row{qw(_version _deleted)};
		foreach my $v (values %$row)
		{
			$v += 0 if defined $v && !ref $v && $v =~ /^-?\d+$/;
		}
	}
	return [ sort map { JSON::PP->new->canonical->encode($_) } @$rows ];
}

# Waits until the target's rows (FINAL, not deleted; the given columns)
# equal the source's; a condition, not a duration.
sub converges
{
	my ($source, $target, $columns, $name, %opts) = @_;
	my $database = $opts{database} // 'replica';
	my $pipeline = $opts{pipeline};
	my $cols_pg = join(', ', map { my $c = $_; $c =~ s/"/""/g; qq{"$c"} } @$columns);
	my $cols_ch = join(', ', map { my $c = $_; $c =~ s/([`\\])/\\$1/g; $c =~ s/\t/\\t/g; $c =~ s/\n/\\n/g; "`$c`" } @$columns);
	(my $table = $target) =~ s/([`\\])/\\$1/g;
	my ($got, $want) = ([], []);
	(my $name_sql = $target) =~ s/([\\'])/\\$1/g;
	foreach (1 .. 600)
	{
		$want = normalized(decode_json($node->safe_psql('postgres',
			"SELECT coalesce(json_agg(s), '[]') FROM (SELECT $cols_pg FROM $source) s")));
		# A target the worker creates (create_tables) may not exist yet.
		$got = $ch->select_rows("SELECT count() AS n FROM system.tables"
				. " WHERE database = '$database' AND name = '$name_sql'")->[0]{n} == 0 ? [] :
			normalized($ch->select_rows(
				"SELECT $cols_ch FROM $database.`$table`" . ($opts{insert_only} ? '' : ' FINAL')
				  . " WHERE _deleted = 0"));
		last if join("\n", @$got) eq join("\n", @$want);
		last if $pipeline && $node->safe_psql('postgres',
			"SELECT state FROM replicant.status WHERE pipeline = '$pipeline'") eq 'halted';
		usleep(100_000);
	}
	is_deeply($got, $want, $name)
	  or diag($pipeline ? $node->safe_psql('postgres',
			"SELECT last_error FROM replicant.status WHERE pipeline = '$pipeline'") : '');
}

sub streaming
{
	my ($pipeline) = @_;
	return ReplicantTest::poll($node,
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$pipeline'");
}

my $url = "$ch->{url}?database=replica";

# ---- odd identifiers -----------------------------------------------------------
my @odd = ddl("replicant.sink_ddl(ARRAY['pub_odd'])");
is(scalar(@odd), 1, 'odd identifiers: one statement');
like($odd[0], qr/^CREATE TABLE `odd\\\\tbl` \(\n  `id` Int32,\n  `x\\\\` Nullable\(String\),\n  `a"b` Nullable\(String\),\n  `t\\`ick` Nullable\(String\),\n  `Mixed Case` Nullable\(Int32\),\n  `tab\\there` Nullable\(String\),\n  `new\\nline` Nullable\(String\),\n/,
	'sink_ddl_backslash_identifier: every identifier back-quoted, backslash, back-quote, tab and newline escaped');
run_ddl('replica', @odd);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('odd', ARRAY['pub_odd'], '$url', format => 'clickhouse')");
ok(streaming('odd'), 'odd identifiers: the pipeline streams');
$node->safe_psql('postgres', "
INSERT INTO \"odd\\tbl\" VALUES (1, 'back\\slash', 'q\"uote', 'b`q', 1, 't', 'n'),
    (2, NULL, NULL, NULL, NULL, NULL, NULL), (3, 'x', 'y', 'z', 3, 'tt', 'nn');
UPDATE \"odd\\tbl\" SET \"x\\\" = 'changed', \"Mixed Case\" = 2 WHERE id = 2;
DELETE FROM \"odd\\tbl\" WHERE id = 3;");
converges("\"odd\\tbl\"", "odd\\tbl",
	[ 'id', "x\\", 'a"b', 't`ick', 'Mixed Case', "tab\there", "new\nline" ],
	'odd identifiers: the target takes what the stream writes', pipeline => 'odd');

# ---- publish_via_partition_root -------------------------------------------------
my @root = ddl("replicant.sink_ddl(ARRAY['pub_root'])");
is(scalar(@root), 1, 'sink_ddl_via_root: one target for the partitioned table, not one per leaf');
like($root[0], qr/^CREATE TABLE `meas` \(\n  `region` String,\n  `id` Int32,\n  `v` Nullable\(Int32\),\n.*ORDER BY \(`region`, `id`\)$/s,
	'... named and keyed as the root, in its columns');
run_ddl('replica', @root);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('root', ARRAY['pub_root'], '$url', format => 'clickhouse')");
ok(streaming('root'), 'via root: the pipeline streams');
$node->safe_psql('postgres', q{
INSERT INTO meas VALUES ('eu', 1, 10), ('us', 2, 20), ('us', 3, 30);
UPDATE meas SET v = 21 WHERE id = 2;
DELETE FROM meas WHERE id = 3;
});
converges('meas', 'meas', [qw(region id v)], 'via root: the root\'s target takes the leaves\' changes',
	pipeline => 'root');

# ---- generated columns ------------------------------------------------------------
my @gen = ddl("replicant.sink_ddl(ARRAY['pub_gen'])");
if ($pg18)
{
	like($gen[0], qr/\n  `b` Nullable\(Int32\),\n/,
		'sink_ddl_generated_columns: publish_generated_columns = stored: the stored generated column has a target column');
}
else
{
	unlike($gen[0], qr/`b`/, 'before 18 generated columns are not published: no target column');
}
run_ddl('replica', @gen);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('gen', ARRAY['pub_gen'], '$url', format => 'clickhouse')");
ok(streaming('gen'), 'generated: the pipeline streams');
$node->safe_psql('postgres', q{
INSERT INTO gen (id, a) VALUES (1, 1), (2, 2);
UPDATE gen SET a = 5 WHERE id = 2;
});
converges('gen', 'gen', [ 'id', 'a', $pg18 ? ('b') : () ],
	'generated: the target takes what the stream writes', pipeline => 'gen');

# ---- column lists that leave out the key (as "key" stands) -----------------------
run_ddl('replica', ddl("replicant.sink_ddl(ARRAY['pub_u', 'pub_audit'])"));
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('lists', ARRAY['pub_u', 'pub_audit'], '$url', format => 'clickhouse')");
ok(streaming('lists'), 'column lists: the pipeline streams');
$node->safe_psql('postgres', q{
INSERT INTO u VALUES ('a@example.com', 'free');
INSERT INTO audit VALUES ('ada', 'login', 's1'), ('bob', 'logout', 's2');
});
# The list leaves part of the identity out: no key, an insert-only target.
converges('audit', 'audit', [qw(who action)],
	'REPLICA IDENTITY FULL with a column list: the target takes the listed columns', pipeline => 'lists',
	insert_only => 1);
ok(ReplicantTest::poll($node,
		"SELECT transactions_delivered >= 1 AND state = 'streaming' FROM replicant.status WHERE pipeline = 'lists'"),
	'an insert-only list without the key is taken by its target, nothing halts');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('$_')") foreach qw(odd root gen lists);

# ---- the natural order: DDL first, a disabled pipeline, then enable ---------------
$node->safe_psql('postgres', q{
CREATE TABLE customers (id bigint PRIMARY KEY, name text, email text);
INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 500) g;
CREATE PUBLICATION pub_c FOR TABLE customers;
});
my @before = ddl("replicant.sink_ddl(ARRAY['pub_c'])");
is(scalar(@before), 1, 'sink_ddl_for_publications: the DDL before any pipeline exists');
run_ddl('replica', @before);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('natural', ARRAY['pub_c'], '$url', snapshot => 'initial',"
	  . " format => 'clickhouse', enabled => false)");
is($node->safe_psql('postgres', "SELECT state, worker_pid IS NULL FROM replicant.status WHERE pipeline = 'natural'"),
	'disabled|t', 'create_pipeline_enabled_false: created disabled, no worker');
is_deeply([ ddl("replicant.sink_ddl('natural')") ], \@before,
	'sink_ddl(pipeline) prints what sink_ddl(publications) printed');
$node->safe_psql('postgres', "INSERT INTO customers VALUES (501, 'late', NULL)");
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('natural')");
converges('customers', 'customers', [qw(id name email)],
	'enabled: the initial snapshot and what came before it arrive', pipeline => 'natural');
$node->safe_psql('postgres', "UPDATE customers SET name = 'renamed' WHERE id <= 10; DELETE FROM customers WHERE id = 500");
converges('customers', 'customers', [qw(id name email)], '... then the stream', pipeline => 'natural');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('natural')");

# ---- create_tables => true ------------------------------------------------------------
$node->safe_psql('postgres', q{
CREATE TABLE kept (id int PRIMARY KEY, v text);
INSERT INTO kept VALUES (1, 'one');
CREATE PUBLICATION pub_auto FOR TABLE customers, kept, "odd\tbl", meas;
});
$node->safe_psql('postgres', q{ALTER PUBLICATION pub_auto SET (publish_via_partition_root = true)});
# An existing target that differs from the DDL is left as it is.
$ch->query_ok('CREATE TABLE auto.kept (id Int32, v Nullable(String), extra Nullable(String),'
	  . ' _version UInt64, _deleted UInt8) ENGINE = ReplacingMergeTree(_version) ORDER BY id');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('made', ARRAY['pub_auto'], '$ch->{url}?database=auto',"
	  . " snapshot => 'initial', format => 'clickhouse', create_tables => true)");
is($ret, 0, 'create_pipeline(..., create_tables => true)') or diag($stderr);
converges('customers', 'customers', [qw(id name email)],
	'create_tables_before_snapshot: the worker creates the missing targets, then the snapshot fills them',
	database => 'auto', pipeline => 'made');
converges('meas', 'meas', [qw(region id v)], '... the root\'s target', database => 'auto', pipeline => 'made');
converges("\"odd\\tbl\"", "odd\\tbl", [ 'id', "x\\", 'a"b' ], '... the odd one', database => 'auto', pipeline => 'made');
converges('kept', 'kept', [qw(id v)], '... and the existing one', database => 'auto', pipeline => 'made');
is_deeply([ map { $_->{name} } @{ $ch->select_rows("SELECT name FROM system.tables WHERE database = 'auto' ORDER BY name") } ],
	[ sort('customers', 'kept', 'meas', "odd\\tbl") ], 'one target per delivered relation');
sub columns_of
{
	my ($table) = @_;
	return join ',', map { $_->{name} } @{ $ch->select_rows(
		"SELECT name FROM system.columns WHERE database = 'auto' AND table = '$table'") };
}
is(columns_of('kept'), 'id,v,extra,_version,_deleted', 'an existing target is never altered');
is(columns_of('customers'), 'id,name,email,_version,_deleted', '... a created one has the columns sink_ddl prints');
like(slurp_file($node->logfile), qr/replicant pipeline "made" made sure its 4 ClickHouse tables exist \(CREATE TABLE IF NOT EXISTS\)/,
	'the log says so');

# A table published later gets its target when the worker starts again.
$node->safe_psql('postgres', q{
CREATE TABLE later (id int PRIMARY KEY);
ALTER PUBLICATION pub_auto ADD TABLE later;
});
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('made', batch_max_transactions => 100)");
$node->safe_psql('postgres', 'INSERT INTO later VALUES (1), (2)');
converges('later', 'later', ['id'], 'a table published later gets its target at the next worker start',
	database => 'auto', pipeline => 'made');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('made')");

# ClickHouse refuses the CREATE TABLE (no such database, code 81): a halt.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('refused', ARRAY['pub_c'], '$ch->{url}?database=nosuch',"
	  . " format => 'clickhouse', create_tables => true)");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'refused'"),
	'create_tables: a refused CREATE TABLE halts the pipeline');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'refused'"),
	qr/^sink rejected table creation: HTTP \d+, error code 81 \(table `customers`\)$/,
	'... naming the code and the table');


sub halt_of
{
	my ($pipeline) = @_;
	ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = '$pipeline'", 60);
	return $node->safe_psql('postgres',
		"SELECT state || ': ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$pipeline'");
}

# ---- columns named as those the format adds (_version, _deleted) -------------------
# Refused up front, where the published columns are known: create_pipeline,
# alter_pipeline and sink_ddl, with a hint; a column list leaving the
# column out is fine.
$node->safe_psql('postgres', q{
CREATE TABLE versioned (id int PRIMARY KEY, _version int, v text);
CREATE PUBLICATION pub_versioned FOR TABLE versioned;
CREATE PUBLICATION pub_versioned_listed FOR TABLE versioned (id, v);
});
my $reserved = qr/ERROR:  column "_version" of table "public\.versioned" has a name that format "clickhouse" reserves/;
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('versioned', ARRAY['pub_versioned'], '$ch->{url}?database=auto',"
	  . " format => 'clickhouse', create_tables => true)");
like($stderr, $reserved, 'reserved_columns: create_pipeline refuses a published column named _version');
like($stderr, qr/HINT:  Leave the column out of the publication with a column list, or rename it\./, '... with a hint');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.pipelines WHERE name = 'versioned'"), '0',
	'... leaving no pipeline');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('versioned')") if $ret == 0;
($ret, $stdout, $stderr) = $node->psql('postgres', "SELECT replicant.sink_ddl(ARRAY['pub_versioned'])");
like($stderr, $reserved, '... so does sink_ddl');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('versioned', ARRAY['pub_versioned'], '$ch->{url}', enabled => false)");
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.alter_pipeline('versioned', format => 'clickhouse')");
like($stderr, $reserved, '... and alter_pipeline to format clickhouse');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('versioned')");
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('versioned', ARRAY['pub_versioned_listed'], '$ch->{url}?database=auto',"
	  . " format => 'clickhouse', enabled => false)");
is($ret, 0, '... a column list that leaves it out is fine') or diag($stderr);
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('versioned')");

# A column added later: the worker's CREATE TABLE, at its next start,
# halts instead of being sent (ClickHouse would answer code 15 forever).
$node->safe_psql('postgres', q{
CREATE TABLE grows (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_grows FOR TABLE grows;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('grows', ARRAY['pub_grows'], '$ch->{url}?database=auto',"
	  . " format => 'clickhouse', create_tables => true)");
ok(streaming('grows'), 'a pipeline with create_tables streams');
$node->safe_psql('postgres', 'ALTER TABLE grows ADD COLUMN _deleted int');
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('grows', batch_max_transactions => 100)");
like(halt_of('grows'), qr/^halted: phase "deliver" failed with error class 42701$/,
	'create_tables_reserved_column: a column named _deleted added later halts at the next CREATE TABLE');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('grows')");

# ---- CREATE TABLE answers a retry cannot change: a halt, never a loop ----------
# A user whose profile forbids DDL (allow_ddl = 0: code 392, which 18.16
# answers even for IF NOT EXISTS on an existing table) or any write
# (readonly = 1: code 164).
$node->safe_psql('postgres', 'CREATE PUBLICATION pub_kept FOR TABLE kept');
$ch->query_ok('CREATE DATABASE noddl');
$ch->query_ok('CREATE TABLE noddl.kept (id Int32, v Nullable(String), _version UInt64, _deleted UInt8)'
	  . ' ENGINE = ReplacingMergeTree(_version) ORDER BY (id)');
my $users = slurp_file("$ch->{dir}/users.xml");
$users =~ s{</profiles>}{<noddl><allow_ddl>0</allow_ddl></noddl><ro><readonly>1</readonly></ro></profiles>};
$users =~ s{</users>}{<inserter><password>ins</password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>noddl</profile><quota>default</quota></inserter><reader><password>rd</password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>ro</profile><quota>default</quota></reader></users>};
open(my $fh, '>', "$ch->{dir}/users.xml") or die $!;
print $fh $users;
close $fh;
foreach my $user ([ 'inserter', 'ins', 392 ], [ 'reader', 'rd', 164 ])
{
	my ($name, $key, $code) = @$user;
	my $known = 0;
	foreach (1 .. 600)
	{
		$known = $ch->query('SELECT 1', headers => { 'X-ClickHouse-User' => $name, 'X-ClickHouse-Key' => $key })->{success};
		last if $known;
		usleep(100_000);
	}
	ok($known, "ClickHouse knows user $name");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('as_$name', ARRAY['pub_kept'], '$ch->{url}?database=noddl',"
		  . " format => 'clickhouse', create_tables => true,"
		  . qq{ headers => '{"X-ClickHouse-User": "$name", "X-ClickHouse-Key": "$key"}')});
	like(halt_of("as_$name"), qr/^halted: sink rejected table creation: HTTP \d+, error code $code \(table `kept`\)$/,
		"create_tables_final_codes: a CREATE TABLE refused with code $code halts");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('as_$name')");
}
$ch->stop;
done_testing();
