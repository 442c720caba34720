# format => 'clickhouse' against the real server (test/ClickHouse.pm): the
# targets made from replicant.sink_ddl(), an initial snapshot, inserts,
# updates, deletes, a key change, a TRUNCATE between rows, an update that
# leaves a TOASTed column unchanged under REPLICA IDENTITY FULL, and at the
# end SELECT ... FINAL WHERE _deleted = 0 equals the source, value for value.
# Then the halts: a target ClickHouse does not have (code 60), and an
# unchanged TOASTed column without REPLICA IDENTITY FULL.
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
my $sink_url = "$ch->{url}?database=replica";

my $node = ReplicantTest::new_node('ch');
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE items (id int PRIMARY KEY, name text, qty int NOT NULL, big text);
ALTER TABLE items REPLICA IDENTITY FULL;
ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE kv (a int, b text, v bigint, PRIMARY KEY (a, b));
CREATE TABLE types (id int PRIMARY KEY, s smallint, i int, l bigint, n numeric(12, 2),
    r real, d double precision, t text, vc varchar(20), u uuid, day date,
    ts timestamp, tstz timestamptz, bin bytea, ints int[], texts text[], b boolean,
    j jsonb, js json);
CREATE TABLE log (at int, what text);
CREATE PUBLICATION pub FOR TABLE items, kv, types, log;
INSERT INTO items SELECT g, 'item ' || g, g, NULL FROM generate_series(1, 20) g;
INSERT INTO kv VALUES (1, 'x', 10), (1, 'y', 11), (2, 'x', 20);
INSERT INTO types VALUES (1, 1, 2, 9007199254740993, 12.5, 1.5, 2.25, 'it''s "q"\n',
    'vc', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-12-01', '2026-12-01 10:00:00.123456',
    '2026-12-01 10:00:00+02', '\x00ff', '{1,2,3}', '{"a","b c"}', true,
    '{"a": [1, "x\"y"], "b": null, "c": {"d": 1.50}}', E'[1,\t{"k": "v\\\\n"}]');
INSERT INTO types (id, s, i, l, n, r, d, t, vc, u, day, ts, tstz, bin, ints, texts, b, j, js)
    VALUES (2, -32768, -2147483648, -9223372036854775808, -0.01, -1e-10, 1e300, '',
    '', '00000000-0000-0000-0000-000000000000', '1970-01-02', '2000-02-29 00:00:00',
    '1999-12-31 23:59:59.999999+00', '\x', '{}', '{}', false, '"a string"', NULL);
INSERT INTO log VALUES (1, 'first');
});

# The targets, as sink_ddl prints them, from a pipeline that delivers nothing.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ddl', ARRAY['pub'], '$sink_url', format => 'clickhouse')");
my @ddl = split /\n(?=CREATE TABLE)/,
  $node->safe_psql('postgres', "SELECT replicant.sink_ddl('ddl')");
is(scalar(@ddl), 4, 'sink_ddl: one CREATE TABLE per published table');
like($ddl[0], qr/^CREATE TABLE `items` \(\n  `id` Int32,\n  `name` Nullable\(String\),\n  `qty` Int32,\n  `big` Nullable\(String\),\n  _version UInt64,\n  _deleted UInt8\n\) ENGINE = ReplacingMergeTree\(_version\) ORDER BY \(`id`\)$/,
	'sink_ddl: a ReplacingMergeTree ordered by the key, nullable where the source is');
like($ddl[1], qr/ORDER BY \(`a`, `b`\)$/, 'sink_ddl: a composite key');
like($ddl[3], qr/ENGINE = MergeTree ORDER BY tuple\(\)$/, 'sink_ddl: a table without a key is insert-only');
$ch->query_ok($_, settings => { database => 'replica' }) foreach @ddl;
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ddl')");

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch', ARRAY['pub'], '$sink_url', snapshot => 'initial', format => 'clickhouse')");

# The numbers as numbers: ClickHouse prints 12.50 where PostgreSQL prints 12.5.
sub normalized
{
	my ($rows) = @_;
	foreach my $row (@$rows)
	{
		foreach my $v (values %$row)
		{
			$v += 0 if defined $v && !ref $v && $v =~ /^-?\d+(\.\d+)?(e[-+]?\d+)?$/i;
			$v = $v ? 1 : 0 if JSON::PP::is_bool($v);
		}
	}
	return $rows;
}

sub source
{
	my ($table, $order) = @_;
	return normalized(decode_json($node->safe_psql('postgres',
		"SELECT coalesce(json_agg(src ORDER BY $order), '[]') FROM $table src")));
}

sub target
{
	my ($table, $order) = @_;
	my $cols = join(', ', map { $_ eq 'u' ? 'toString(u) AS u' : $_ eq 'day' ? 'toString(day) AS day' : $_ }
		@{ $node->{columns}{$table} });
	my $final = $table eq 'log' ? '' : 'FINAL';    # a MergeTree has none
	my $rows = $ch->select_rows(
		"SELECT $cols FROM replica.$table $final WHERE _deleted = 0 ORDER BY $order");
	# jsonb and json arrive as strings holding their text (18.16 has no JSON type)
	foreach my $row (@$rows)
	{
		$row->{$_} = defined $row->{$_} ? JSON::PP->new->allow_nonref->decode($row->{$_}) : undef
		  foreach grep { $_ eq 'j' || $_ eq 'js' } keys %$row;
	}
	return normalized($rows);
}

# json and jsonb, their text exactly: what a ClickHouse user reads.
sub json_text_matches
{
	my ($name) = @_;
	my $want = $node->safe_psql('postgres',
		"SELECT string_agg(id || ':' || coalesce(j::text, '<null>') || ':' || coalesce(js::text, '<null>'), '|' ORDER BY id) FROM types");
	my $got = join '|', map { "$_->{id}:" . ($_->{j} // '<null>') . ':' . ($_->{js} // '<null>') }
	  @{ $ch->select_rows('SELECT id, j, js FROM replica.types FINAL WHERE _deleted = 0 ORDER BY id') };
	is($got, $want, $name);
}

# The version of every row a table's target holds (raw, without FINAL).
sub versions
{
	my ($table, $where) = @_;
	$where //= '1';
	return [ map { $_->{_version} } @{ $ch->select_rows(
		"SELECT DISTINCT _version FROM replica.$table WHERE $where ORDER BY _version") } ];
}

sub lsn_number
{
	my ($lsn) = @_;
	return $node->safe_psql('postgres', "SELECT '$lsn'::pg_lsn - '0/0'");
}

# Waits until the target equals the source (a condition, not a duration).
sub converges
{
	my ($table, $order, $name) = @_;
	$node->{columns}{$table} //= [ split /,/, $node->safe_psql('postgres',
		"SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute"
		. " WHERE attrelid = '$table'::regclass AND attnum > 0 AND NOT attisdropped") ];
	my ($got, $want);
	foreach (1 .. 600)
	{
		$want = source($table, $order);
		$got = target($table, $order);
		last if JSON::PP->new->canonical->encode($got) eq JSON::PP->new->canonical->encode($want);
		usleep(100_000);
	}
	is_deeply($got, $want, $name);
}

converges('items', 'id', 'initial snapshot: items');
converges('kv', 'a, b', 'initial snapshot: a composite key');
converges('types', 'id', 'initial snapshot: every type, value for value');
json_text_matches('initial snapshot: jsonb and json as strings holding their text');

# Snapshot rows carry the slot's consistent point, where the stream starts.
# The worker logs it once the snapshot is done, which can be after its rows
# are in ClickHouse.
$node->wait_for_log(qr/replicant pipeline "ch" streaming from/);
my ($streaming_from) = PostgreSQL::Test::Utils::slurp_file($node->logfile)
  =~ /replicant pipeline "ch" streaming from ([0-9A-F]+\/[0-9A-F]+)/;
ok(defined $streaming_from, 'the worker logs where it streams from');
my $consistent_point = lsn_number($streaming_from);
is_deeply(versions($_), [$consistent_point], "snapshot rows of $_ have the consistent point as version")
  foreach qw(items kv types);

$node->safe_psql('postgres', q{
INSERT INTO items VALUES (21, 'new', 1, repeat('toasted ', 100000));
UPDATE items SET qty = qty + 100 WHERE id <= 5;
DELETE FROM items WHERE id BETWEEN 6 AND 8;
UPDATE items SET id = 1000 WHERE id = 9;
BEGIN;
UPDATE items SET qty = 1 WHERE id = 10;
UPDATE items SET qty = 2 WHERE id = 10;
UPDATE items SET name = NULL WHERE id = 10;
COMMIT;
INSERT INTO kv VALUES (3, 'z', 30);
BEGIN;
INSERT INTO kv VALUES (4, 'before', 40);
TRUNCATE kv;
INSERT INTO kv VALUES (5, 'after', 50);
COMMIT;
UPDATE kv SET b = 'moved' WHERE a = 5;
INSERT INTO types SELECT 3, s, i, l, n, r, d, t, vc, u, day, ts, tstz, bin, ints, texts, NULL, j, js FROM types WHERE id = 1;
UPDATE types SET texts = '{}', n = 99.99, j = '[true, 2]', js = '{"x" : 1}' WHERE id = 1;
INSERT INTO types (id, ints, texts, j, js) VALUES (4, '{}', '{}', '12', '"s"');
DELETE FROM types WHERE id = 2;
INSERT INTO log VALUES (2, 'second');
});
converges('items', 'id', 'inserts, updates, deletes and a key change: items');
converges('kv', 'a, b', 'a TRUNCATE between rows, then a key change: kv');
converges('types', 'id', 'types after changes');
json_text_matches('jsonb and json after changes, their text exactly');
cmp_ok(versions('types', 'id = 4')->[0], '>', $consistent_point,
	'a stream row has a larger version than the snapshot rows');
converges('log', 'at', 'a table without a key: insert-only');

# An update that leaves the TOASTed column out: the old row (FULL) fills it.
$node->safe_psql('postgres', q{UPDATE items SET qty = 7 WHERE id = 21});
converges('items', 'id', 'an unchanged TOASTed column comes from the old row under REPLICA IDENTITY FULL');
is($ch->select_rows('SELECT length(big) AS n FROM replica.items FINAL WHERE id = 21')->[0]{n},
	800000, '... the whole value');

# A backfill on the streaming pipeline of a table whose target holds stream
# rows: the chunk's rows get a version above those rows' (its low watermark),
# and the stream's later changes get larger ones still and win over them.
$node->safe_psql('postgres', q{INSERT INTO kv SELECT g, 'g', g FROM generate_series(10, 14) g});
converges('kv', 'a, b', 'kv before the backfill');
my $before = versions('kv')->[-1];
my $kv_rows = $node->safe_psql('postgres', 'SELECT count(*) FROM kv');
my $backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('ch', 'kv')");
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $backfill"),
	'a backfill completes');
my $backfilled = versions('kv', "_version > $before");
is(scalar(@$backfilled), 1, 'the backfill chunk\'s rows share one version, above the stream rows before it');
is($ch->select_rows("SELECT count() AS c FROM replica.kv WHERE _version > $before")->[0]{c}, $kv_rows,
	'... one row per source row');
converges('kv', 'a, b', 'FINAL equals the source after the backfill over stream rows');
$node->safe_psql('postgres', q{UPDATE kv SET v = v + 1 WHERE a >= 12});
converges('kv', 'a, b', 'backfilled rows, then the stream over them');
is_deeply(versions('kv FINAL', '_deleted = 0 AND a < 12'), $backfilled,
	'rows the stream left alone since keep the backfill\'s version, over the older stream rows');
cmp_ok(versions('kv FINAL', 'a >= 12')->[0], '>', $backfilled->[0],
	'the stream rows committed after the backfill have larger versions');

# REPLICA IDENTITY FULL without a primary key, with a stored generated
# column that is not published (before 18, and on 18 without
# publish_generated_columns = stored): the deleted rows of an update or a
# delete carry the key, which holds the published columns only, as new does
# and as the target has them (an unknown column would halt: code 117).
$node->safe_psql('postgres', q{
CREATE TABLE gfull (a int NOT NULL, b text NOT NULL, g text GENERATED ALWAYS AS (b || '!') STORED);
ALTER TABLE gfull REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_gfull FOR TABLE gfull;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch_gfull', ARRAY['pub_gfull'], '$sink_url', format => 'clickhouse')");
$ch->query_ok($_, settings => { database => 'replica' })
  foreach split /\n(?=CREATE TABLE)/, $node->safe_psql('postgres', "SELECT replicant.sink_ddl('ch_gfull')");
$node->safe_psql('postgres', q{INSERT INTO gfull (a, b) VALUES (1, 'one'), (2, 'two')});
# 18 refuses them: the replica identity holds an unpublished generated column.
$node->safe_psql('postgres', q{
UPDATE gfull SET b = 'uno' WHERE a = 1;
DELETE FROM gfull WHERE a = 2;
}) if $node->pg_version < 18;
$node->safe_psql('postgres', q{INSERT INTO gfull (a, b) VALUES (3, 'three')});
{
	my ($got, $want);
	foreach (1 .. 600)
	{
		$want = $node->safe_psql('postgres', "SELECT string_agg(a || ':' || b, ',' ORDER BY a) FROM gfull");
		$got = join ',', map { "$_->{a}:$_->{b}" }
		  @{ $ch->select_rows('SELECT a, b FROM replica.gfull FINAL WHERE _deleted = 0 ORDER BY a') };
		last if $got eq $want;
		usleep(100_000);
	}
	is($got, $want, 'REPLICA IDENTITY FULL with an unpublished generated column: its changes arrive');
	is($node->safe_psql('postgres', "SELECT state || '|' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'ch_gfull'"),
		'streaming|', '... and the pipeline streams');
}

# ---- halts ---------------------------------------------------------------------
$node->safe_psql('postgres', q{
CREATE TABLE missing (id int PRIMARY KEY);
CREATE PUBLICATION pub_missing FOR TABLE missing;
CREATE TABLE plain (id int PRIMARY KEY, big text, n int);
ALTER TABLE plain ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE PUBLICATION pub_plain FOR TABLE plain;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch_missing', ARRAY['pub_missing'], '$sink_url', format => 'clickhouse')");
$node->safe_psql('postgres', 'INSERT INTO missing VALUES (1)');
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch_missing'"),
	'a target ClickHouse does not have halts the pipeline');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch_missing'"),
	qr/error code 60 .*table `missing`/, '... naming the code and the table');

# Bad data for the target's type: 18.16 answers 500 with "Code: N" opening the
# body (current servers a 4xx and X-ClickHouse-Exception-Code): a halt too.
$node->safe_psql('postgres', q{
CREATE TABLE badtype (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_badtype FOR TABLE badtype;
});
$ch->query_ok('CREATE TABLE replica.badtype (id Int32, v UInt8, _version UInt64, _deleted UInt8) ENGINE = ReplacingMergeTree(_version) ORDER BY id');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch_badtype', ARRAY['pub_badtype'], '$sink_url', format => 'clickhouse')");
$node->safe_psql('postgres', q{INSERT INTO badtype SELECT 1, 'not a' || ' number'});
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch_badtype'"),
	'a value the target column cannot take halts the pipeline');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch_badtype'"),
	qr/^sink rejected batch: HTTP \d+, error code \d+ \(table `badtype`, commit LSN [0-9A-F\/]+\)$/,
	'... naming the code and the table, and nothing of the answer');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/not a number/,
	'the value is in no log line');

my ($stdout, $stderr);
$node->psql('postgres',
	"SELECT replicant.create_pipeline('ch_plain', ARRAY['pub_plain', 'pub'], '$sink_url', format => 'clickhouse')",
	stdout => \$stdout, stderr => \$stderr);
like($stderr, qr/WARNING:  table "public.plain" has columns that can be TOASTed but not REPLICA IDENTITY FULL.*HINT:  Run ALTER TABLE ... REPLICA IDENTITY FULL on the table before creating the pipeline; when its replica identity is its primary key, doing so later is safe too\./s,
	'create_pipeline warns of a table that may leave TOASTed columns out, and says when to fix it');
unlike($stderr, qr/table "public.items"/, '... and not of one with REPLICA IDENTITY FULL');
$node->psql('postgres', "SELECT replicant.alter_pipeline('ch_missing', format => 'clickhouse', publication => ARRAY['pub_plain'])",
	stderr => \$stderr);
like($stderr, qr/WARNING:  table "public.plain" has columns that can be TOASTed/,
	'alter_pipeline warns likewise when it sets the format');
$ch->query_ok('CREATE TABLE replica.plain (id Int32, big Nullable(String), n Nullable(Int32), _version UInt64, _deleted UInt8) ENGINE = ReplacingMergeTree(_version) ORDER BY id');
$node->safe_psql('postgres', q{
INSERT INTO plain VALUES (1, repeat('x', 100000), 1);
UPDATE plain SET n = 2;
});
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch_plain'"),
	'an unchanged TOASTed column without REPLICA IDENTITY FULL halts the pipeline');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch_plain'"),
	qr/table "plain".*REPLICA IDENTITY FULL/, '... with a hint naming the table and the setting');
is($ch->select_rows('SELECT count() AS c FROM replica.plain WHERE n = 2')->[0]{c}, 0,
	'... and nothing of that update reaches ClickHouse');

# Bad data on the snapshot and the backfill path: the halt names the table too.
$node->safe_psql('postgres', q{
CREATE TABLE badsnap (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_badsnap FOR TABLE badsnap;
INSERT INTO badsnap VALUES (1, 'snapshot' || ' value');
CREATE TABLE badfill (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_badfill FOR TABLE badfill;
INSERT INTO badfill VALUES (1, 'backfill' || ' value');
});
$ch->query_ok("CREATE TABLE replica.$_ (id Int32, v UInt8, _version UInt64, _deleted UInt8) ENGINE = ReplacingMergeTree(_version) ORDER BY id")
  foreach qw(badsnap badfill);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch_badsnap', ARRAY['pub_badsnap'], '$sink_url', snapshot => 'initial', format => 'clickhouse')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch_badsnap'"),
	'a snapshot row the target cannot take halts the pipeline');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch_badsnap'"),
	qr/^sink rejected snapshot batch: HTTP \d+, error code \d+ \(table "badsnap"\)$/,
	'... naming the code and the table');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch_badfill', ARRAY['pub_badfill'], '$sink_url', format => 'clickhouse')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ch_badfill'"),
	'a pipeline without snapshot streams');
$node->safe_psql('postgres', "SELECT replicant.backfill('ch_badfill', 'badfill')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'ch_badfill'"),
	'a backfill row the target cannot take halts the pipeline');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch_badfill'"),
	qr/^sink rejected backfill batch: HTTP \d+, error code \d+ \(table "badfill"\)$/,
	'... naming the code and the table');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/snapshot value|backfill value/,
	'neither value is in a log line');

$ch->stop;
done_testing();
