# The ClickHouse harness (test/ClickHouse.pm) against the real server that
# .ci/run installs (Debian 12: clickhouse-server 18.16), and what that server
# does with what a `format => 'clickhouse'` sink client would send: rows as
# `INSERT ... FORMAT JSONEachRow` over HTTP into a ReplacingMergeTree keyed
# by a version column, read back with FINAL.  The ClickHouse format's test
# builds on this.
#
# What 18.16 accepts, as checked below (current servers accept all of it):
# - ReplacingMergeTree(version) with ORDER BY the key; SELECT ... FINAL gives
#   the row of the highest version per key, whatever order the rows came in,
#   so a re-sent batch changes nothing.  A deleted flag column is filtered by
#   the reader: ReplacingMergeTree(version, is_deleted) is newer than 18.16.
# - JSONEachRow input: 64-bit integers and Decimals as JSON numbers, exact
#   (18.16 refuses a Decimal in quotes), UUID and Date as strings, DateTime as
#   'YYYY-MM-DD hh:mm:ss' (the setting date_time_input_format is 'basic'),
#   arrays as JSON arrays, null into a Nullable column; TRUNCATE TABLE.
# - JSONEachRow output quotes 64-bit integers unless
#   output_format_json_quote_64bit_integers=0.
# - Errors: HTTP 500 for bad data (Code: 27) and an unknown field (Code: 117),
#   404 for an unknown table (Code: 60) or setting (Code: 115), with the code
#   at the start of the body and no X-ClickHouse-Exception-Code header (which
#   current servers send, with 4xx statuses).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use ClickHouse;

ClickHouse::require_server();

my $ch = ClickHouse->start;
like($ch->{version}, qr/^\d+\.\d+/, "the server answers over HTTP ($ch->{version})");

# ---- versions: the newest version of each key wins, in any arrival order ---
$ch->query_ok(q{
	CREATE TABLE t (id Int64, name String, total Float64, _version UInt64, _deleted UInt8)
	ENGINE = ReplacingMergeTree(_version) ORDER BY id});

sub rows { return join('', map { encode_json($_) . "\n" } @_); }

my $batch1 = rows(
	{ id => 1, name => 'a', total => 1.5, _version => 100, _deleted => 0 },
	{ id => 2, name => 'b', total => 2,   _version => 100, _deleted => 0 },
	{ id => 3, name => 'c', total => 3,   _version => 100, _deleted => 0 });
my $batch2 = rows(
	{ id => 1, name => 'a2', total => 10.25, _version => 200, _deleted => 0 },
	{ id => 2, name => 'b',  total => 2,     _version => 201, _deleted => 1 },
	{ id => 9007199254740993, name => 'big', total => 0, _version => 18446744073709551615,
		_deleted => 0 });
my $insert = 'INSERT INTO t FORMAT JSONEachRow';
is($ch->query($insert, data => $batch2)->{status}, 200, 'INSERT ... FORMAT JSONEachRow: 200');
$ch->query_ok($insert, data => $batch1);    # older versions, arriving later

my $final = 'SELECT id, name, total, _version FROM t FINAL WHERE _deleted = 0 ORDER BY id';
my $expected = [
	{ id => 1, name => 'a2', total => 10.25, _version => 200 },
	{ id => 3, name => 'c', total => 3, _version => 100 },
	{ id => 9007199254740993, name => 'big', total => 0, _version => 18446744073709551615 },
];
is_deeply($ch->select_rows($final), $expected,
	'FINAL with the deleted flag filtered: the newest version of each key, deletes gone');

$ch->query_ok($insert, data => $batch1 . $batch2);    # a batch re-sent after a crash
is_deeply($ch->select_rows($final), $expected, 'sending the rows again changes nothing');
like($ch->query_ok("SELECT _version FROM t FINAL WHERE id = 1 FORMAT JSONEachRow"),
	qr/^\{"_version":"200"\}$/m, 'JSONEachRow output quotes 64-bit integers by default');

# ---- the column types a replicated row needs ---------------------------------
$ch->query_ok(q{
	CREATE TABLE types (k Int32, d Decimal(38, 10), u UUID, day Date, at DateTime,
	                    ints Array(Int32), texts Array(String), maybe Nullable(String),
	                    flag UInt8, _version UInt64)
	ENGINE = ReplacingMergeTree(_version) ORDER BY k});
# (the Decimal written as JSON text: a Perl number would be a double)
my $typed = q({"k":1,"d":12345678901234567.1234567891,"u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",)
  . q("day":"2026-12-01","at":"2026-12-01 10:00:00","ints":[1,2],"texts":["x","it's \\"q\\""],)
  . qq("maybe":null,"flag":1,"_version":1}\n);
$ch->query_ok('INSERT INTO types FORMAT JSONEachRow', data => $typed);
is_deeply(
	$ch->select_rows('SELECT k, toString(u) AS u, toString(day) AS day, toString(at) AS at,
	                         ints, texts, maybe, flag FROM types FINAL'),
	[
		{
			k     => 1, u => 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
			day   => '2026-12-01', at => '2026-12-01 10:00:00', ints => [ 1, 2 ],
			texts => [ 'x', "it's \"q\"" ], maybe => undef, flag => 1
		}
	],
	'UUID, Date, DateTime, arrays and a null round-trip');
# 18.16's toString() garbled a Decimal128 with 28 integer digits (seen here);
# JSONEachRow output is exact.
like($ch->query_ok('SELECT d FROM types FORMAT JSONEachRow'),
	qr/^\{"d":12345678901234567\.1234567891\}$/m, 'a Decimal from a JSON number is exact');
$ch->query_ok('TRUNCATE TABLE types');
is($ch->query_ok('SELECT count() FROM types'), "0\n", 'TRUNCATE TABLE empties a table');

# ---- errors, classified by their ClickHouse code -------------------------------
sub error_of
{
	my ($r) = @_;
	return sprintf('%d %s', $r->{status}, ClickHouse::error_code($r) // 'none');
}
my $bad = $ch->query($insert, data => qq{{"id":"bad","_version":1}\n});
ok(!$bad->{success}, 'a value of the wrong type is refused');
like(error_of($bad), qr/^(500 27|4\d\d \d+)$/, "... with its code (here: " . error_of($bad) . ')');
my $unknown_field = $ch->query($insert, data => qq{{"id":5,"nope":1,"_version":1}\n});
like(error_of($unknown_field), qr/^(500|4\d\d) 117$/,
	'an unknown column: code 117 (here: ' . error_of($unknown_field) . ')');
my $unknown_table = $ch->query('INSERT INTO nope FORMAT JSONEachRow', data => qq{{"id":1}\n});
like(error_of($unknown_table), qr/^404 60$/, 'an unknown table: 404, code 60');
is($ch->select_rows('SELECT count() AS n FROM t WHERE id = 5')->[0]{n}, 0,
	'a refused INSERT stores nothing');

# ---- stop, crash and restart, as the fault tests will -----------------------------
$ch->stop;
is($ch->query('SELECT 1')->{status}, 599, 'a stopped server refuses connections');
$ch->restart;
is_deeply($ch->select_rows($final), $expected, 'after a restart the rows are there');
$ch->query_ok($insert, data => rows({ id => 4, name => 'd', total => 4, _version => 300,
			_deleted => 0 }));
$ch->stop(signal => 'KILL');
$ch->restart;
is($ch->select_rows('SELECT count() AS n FROM t FINAL WHERE id = 4')->[0]{n}, 1,
	'an INSERT answered 200 survives kill -9 of the server');
$ch->stop;

done_testing();
