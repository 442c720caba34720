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
#    destination writes it whole (review rv-fix 1);
# 4. when decoding goes back for a destination that is behind (resumed),
#    a ClickHouse destination whose checkpoint is past such an update does
#    not meet it again: it was added after it (with REPLICA IDENTITY FULL
#    set meanwhile), and halted falsely at it (review rv-fix 3);
# 5. nor when the destination behind has the same format: the update is a
#    hole in that format's batches; the destination below it gets what
#    commits before it, never what follows, and halts there alone, while
#    the one past it goes on (both halted; review of 4);
# 6. a backfill waiting for a halted destination says which.
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
	skip 'clickhouse-server is not installed', 24
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

	# 4.
	$ch->query_ok('CREATE DATABASE s');
	$node->safe_psql('postgres', q{
		CREATE TABLE u (id int PRIMARY KEY, big text);
		ALTER TABLE u ALTER COLUMN big SET STORAGE EXTERNAL;
		CREATE PUBLICATION upub FOR TABLE u;
	});
	my $sink_a4 = ReplicantTest::start_sink(name => 'sink_a4');
	my $sink_b4 = ReplicantTest::start_sink(name => 'sink_b4');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('s', 'upub', '$sink_a4->{url}', destination => 'a')");
	$node->safe_psql('postgres', qq{
		SELECT replicant.add_destination('s', 'b', '$sink_b4->{url}');
		SELECT replicant.add_destination('s', 'ch', '$ch->{url}?database=s', format => 'clickhouse',
			create_tables => true);
	});
	ok(poll("SELECT count(*) = 3 AND bool_and(state = 'streaming') FROM replicant.destination_status WHERE pipeline = 's'"),
		'4: a, b and ch stream');
	$sink_a4->control({ fail_status => 400 });
	$node->safe_psql('postgres', "INSERT INTO u VALUES (1, repeat('x', 10000))");
	ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 's' AND destination = 'a'"),
		'4: a halts (its sink refuses), its checkpoint behind what follows');
	$node->safe_psql('postgres', 'UPDATE u SET id = 2');
	ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 's' AND destination = 'ch'"),
		'4: ch halts at the update it cannot write whole');
	like(dest('s', 'ch', 'last_error'), qr/^update of table "u" left TOASTed columns unchanged/,
		'4: ch says why');
	$node->safe_psql('postgres', 'ALTER TABLE u REPLICA IDENTITY FULL');
	$node->safe_psql('postgres', qq{
		SELECT replicant.drop_destination('s', 'ch');
		SELECT replicant.add_destination('s', 'ch4', '$ch->{url}?database=s', format => 'clickhouse',
			create_tables => true);
	});
	$node->safe_psql('postgres', "INSERT INTO u VALUES (3, 'after')");
	my $after = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	$sink_a4->control({ clear => 1 });
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('s', 'a')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a4, ['u'], 60),
		'4: resumed, a gets what it missed (decoding went back past the update)');
	ok(poll("SELECT replicant.await_delivered('s', '$after', 1000)", 120), '4: every destination has the insert after it');
	is(dest('s', 'ch4', 'state') . '/' . dest('s', 'ch4', "coalesce(last_error, '')"), 'streaming/',
		'4: ch4, added after the update, did not meet it again');
	is(dest('s', 'b', 'state'), 'streaming', '4: b streams on');
	is_deeply($ch->select_rows('SELECT id FROM s.u FINAL WHERE _deleted = 0 ORDER BY id'),
		[ { id => 1 }, { id => 3 } ], '4: ClickHouse has the row before the update (ch) and the one after it (ch4)');

	# 5.
	$ch->query_ok('CREATE DATABASE t5');
	$ch->query_ok('CREATE DATABASE t5y');
	$node->safe_psql('postgres', q{
		CREATE TABLE v (id int PRIMARY KEY, big text);
		ALTER TABLE v ALTER COLUMN big SET STORAGE EXTERNAL;
		CREATE PUBLICATION vpub FOR TABLE v;
	});
	my $sink_b5 = ReplicantTest::start_sink(name => 'sink_b5');
	# Created disabled, so that one worker starts, with both: a worker that
	# started before y was added is restarted, and its successor would make
	# y's table again after the test dropped it below.
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('s5', 'vpub', '$sink_b5->{url}', destination => 'b', enabled => false)");
	$node->safe_psql('postgres',
		"SELECT replicant.add_destination('s5', 'y', '$ch->{url}?database=t5y', format => 'clickhouse', create_tables => true)");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('s5')");
	ok(poll("SELECT count(*) = 2 AND bool_and(state = 'streaming') FROM replicant.destination_status WHERE pipeline = 's5'"),
		'5: b and y stream');
	# y falls behind: its table is gone (a final error), until its resume
	# makes it again (create_tables).
	$ch->query_ok('DROP TABLE t5y.v');
	$node->safe_psql('postgres', "INSERT INTO v VALUES (1, repeat('x', 10000))");
	ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 's5' AND destination = 'y'"),
		'5: y halts before the update');
	$node->safe_psql('postgres', 'UPDATE v SET id = 2');
	$node->safe_psql('postgres', 'ALTER TABLE v REPLICA IDENTITY FULL');
	$node->safe_psql('postgres',
		"SELECT replicant.add_destination('s5', 'x', '$ch->{url}?database=t5', format => 'clickhouse', create_tables => true)");
	$node->safe_psql('postgres', "INSERT INTO v VALUES (3, 'after')");
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('s5', 'y')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_b5, ['v'], 60), '5: b equals the source');
	ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 's5' AND destination = 'y'"),
		'5: resumed, y halts again');
	like(dest('s5', 'y', 'last_error'), qr/^update of table "v" left TOASTed columns unchanged/,
		'5: at the update it cannot take');
	my $x_has = 0;
	for (1 .. 600)
	{
		$x_has = @{ $ch->select_rows('SELECT id FROM t5.v WHERE id = 3') } and last;
		select undef, undef, undef, 0.1;
	}
	ok($x_has, '5: x gets the insert after the update');
	is(dest('s5', 'x', 'state') . '/' . dest('s5', 'x', "coalesce(last_error, '')"), 'streaming/',
		'5: x, past the update, is not halted with y');
	is_deeply($ch->select_rows('SELECT id FROM t5.v FINAL WHERE _deleted = 0 ORDER BY id'),
		[ { id => 3 } ], '5: x has only what committed after it was added');
	is_deeply($ch->select_rows('SELECT id FROM t5y.v FINAL WHERE _deleted = 0 ORDER BY id'),
		[ { id => 1 } ], '5: y got what came before the update, nothing after it');
	is(dest('s5', 'b', 'state'), 'streaming', '5: b streams on');

	# 6. A backfill waits while y is halted, and says so; it runs once y
	# is dropped.
	my $bf = $node->safe_psql('postgres', "SELECT replicant.backfill('s5', 'v')");
	is($node->safe_psql('postgres', "SELECT state || ': ' || waiting_for FROM replicant.backfill_status WHERE id = $bf"),
		'planned: destination "y" is halted', '6: the backfill waits for the halted destination, and says so');
	$node->safe_psql('postgres', "SELECT replicant.drop_destination('s5', 'y')");
	ok(poll("SELECT state = 'done' AND waiting_for IS NULL FROM replicant.backfill_status WHERE id = $bf", 120),
		'6: without it the backfill runs to the end');
}

done_testing();
