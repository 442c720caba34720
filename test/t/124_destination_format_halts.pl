# A condition of one destination's format halts that destination alone
# (review rv-fmt): beside a replicant-format destination "a",
# 1. a ClickHouse destination meets an update that moves the key and leaves
#    a TOASTed column unchanged (default replica identity: the old row has
#    the key only, so the format cannot write the whole row): it halts
#    saying why, "a" gets the changes after it, and the pipeline is not
#    halted (the format raised an error while encoding, which halted the
#    pipeline, and did again on every resume);
# 2. a ClickHouse destination with create_tables whose CREATE TABLE its sink
#    refuses (400) halts alone, recorded on the destination, while "a"
#    streams on (it halted the pipeline);
# 3. but an update whose old row has the unchanged columns (a key stored
#    out of line is logged whole, detoasted) is no halt: a ClickHouse
#    destination writes it whole (review rv-fix 1).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ClickHouse;
use ReplicantTest;

my $node = ReplicantTest::new_node('format_halts', conf => "replicant.checkpoint_interval = 0");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_c = ReplicantTest::start_sink(name => 'sink_c');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, big text);
	ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL;
	CREATE PUBLICATION pub FOR TABLE t;
});

sub poll { return ReplicantTest::poll($node, @_); }

sub dest
{
	my ($p, $d, $column) = @_;
	return $node->safe_psql('postgres',
		"SELECT $column FROM replicant.destination_status WHERE pipeline = '$p' AND destination = '$d'");
}

# 1.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}', destination => 'a')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, repeat('x', 10000))");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, ['t'], 60), '1: a has the row');
# ch (a reference sink: it takes no ClickHouse statement) gets nothing
# before the update: it starts at the call.
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'ch', '$sink_c->{url}', format => 'clickhouse')");
ok(poll("SELECT bool_and(state = 'streaming') FROM replicant.destination_status WHERE pipeline = 'p'"),
	'1: a and ch stream');
$node->safe_psql('postgres', 'UPDATE t SET id = 2');
$node->safe_psql('postgres', "INSERT INTO t VALUES (3, 'after')");
ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'ch'"),
	'1: ch halts');
like(dest('p', 'ch', 'last_error'),
	qr/^update of table "t" left TOASTed columns unchanged, and the table's replica identity does not log them/,
	'1: its reason says why, without a value');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, ['t'], 60), '1: a equals the source');
is($node->safe_psql('postgres', "SELECT coalesce(halt_reason, '') FROM replicant.pipelines WHERE name = 'p'"),
	'', '1: the pipeline is not halted');
is(dest('p', 'a', 'state'), 'streaming', '1: a streams on');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('p')");

# 2.
$node->safe_psql('postgres', 'ALTER TABLE t REPLICA IDENTITY FULL');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('q', 'pub', '$sink_a->{url}', destination => 'a')");
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'q'"), '2: a streams');
$sink_c->control({ clear => 1, fail_status => 400 });
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('q', 'ch', '$sink_c->{url}', format => 'clickhouse', create_tables => true)");
ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 'q' AND destination = 'ch'"),
	'2: ch halts');
like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.destinations WHERE name = 'ch'"),
	qr/^sink rejected table creation: HTTP 400 \(table `t`\)/, '2: the halt is recorded on the destination');
$node->safe_psql('postgres', "INSERT INTO t VALUES (4, 'four')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, ['t'], 60), '2: a equals the source');
is($node->safe_psql('postgres', "SELECT coalesce(halt_reason, '') FROM replicant.pipelines WHERE name = 'q'"),
	'', '2: the pipeline is not halted');
is(dest('q', 'a', 'state'), 'streaming', '2: a streams on');

# 3.
SKIP:
{
	skip 'clickhouse-server is not installed', 3
	  unless defined ClickHouse::server_binary() || $ENV{CI};
	my $ch = ClickHouse->start;
	$ch->query_ok('CREATE DATABASE r');
	$node->safe_psql('postgres', q{
		CREATE TABLE kt (k text PRIMARY KEY, v int);
		ALTER TABLE kt ALTER COLUMN k SET STORAGE EXTERNAL;
		CREATE PUBLICATION kpub FOR TABLE kt;
	});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('r', 'kpub', '$ch->{url}?database=r', format => 'clickhouse',"
		  . " create_tables => true)");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'r'"), '3: r streams');
	$node->safe_psql('postgres',
		"INSERT INTO kt SELECT string_agg(md5(g::text), '' ORDER BY g), 1 FROM generate_series(1, 72) g");
	$node->safe_psql('postgres', 'UPDATE kt SET v = 2');
	ok(poll("SELECT replicant.await_delivered('r', pg_current_wal_lsn(), 1000)", 120),
		'3: the update of a row whose key is stored out of line is delivered');
	is_deeply($ch->select_rows('SELECT length(k) AS l, v FROM r.kt FINAL WHERE _deleted = 0'),
		[ { l => 2304, v => 2 } ], '3: ClickHouse has the whole row');
}

done_testing();
