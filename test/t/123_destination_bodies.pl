# Destinations of one format share the render target's batches: a round
# starts every destination's request of a batch before any body is read,
# so each request must read its body at its own position (review rv-fmt).
# The body reader's position and range lived in the batch, and ClickHouse's
# plan and row reader in statics: two destinations sending one batch whose
# body is too large to be copied at once (over 16 kB) read each other's
# bytes.  Here two destinations of the replicant format, and two of the
# ClickHouse format, each get large batches: every one equals the source,
# with no retry and no halt.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ClickHouse;
use ReplicantTest;

my $node = ReplicantTest::new_node('bodies', conf => "replicant.checkpoint_interval = 0");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE x (id int PRIMARY KEY, v text);
	CREATE TABLE y (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE x, y;
});

# 300 transactions of two rows of 20-40 kB (text the server keeps inline:
# repeat of an md5 compresses, so the body is large, the WAL small).
sub workload
{
	my $sql = '';
	for my $i (1 .. 300)
	{
		$sql .= "BEGIN; INSERT INTO x VALUES ($i, repeat(md5('$i'), " . (600 + $i % 50) . "));"
		  . " INSERT INTO y VALUES ($i, repeat(md5('y$i'), 500)); COMMIT;\n";
	}
	$node->safe_psql('postgres', $sql);
}

sub destinations_clean
{
	my ($p, $label) = @_;
	is($node->safe_psql('postgres',
		"SELECT string_agg(destination || ': ' || state || ', ' || retries || ' retries'"
		  . " || coalesce(', ' || last_error, ''), '; ' ORDER BY destination)"
		  . " FROM replicant.destination_status WHERE pipeline = '$p'"),
		$label, "$p: every destination streams, none retried");
}

# 1. Two destinations of the replicant format.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}', enabled => false)");
$node->safe_psql('postgres', "SELECT replicant.add_destination('p', 'b', '$sink_b->{url}')");
workload();
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 180),
	'p: delivered');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $_, [ 'x', 'y' ], 60), "p: $_->{name} equals the source")
  foreach ($sink_a, $sink_b);
cmp_ok($node->safe_psql('postgres', 'SELECT min(length(v)) FROM x'), '>', 16 * 1024,
	'p: every request was over 16 kB (a row of x alone is)');
destinations_clean('p', 'b: streaming, 0 retries; default: streaming, 0 retries');

# 2. Two destinations of the ClickHouse format, one database each.
SKIP:
{
	skip 'clickhouse-server is not installed', 5
	  unless defined ClickHouse::server_binary() || $ENV{CI};
	my $ch = ClickHouse->start;
	$ch->query_ok("CREATE DATABASE $_") foreach qw(r1 r2);
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('p')");
	$node->safe_psql('postgres', 'TRUNCATE x, y');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('c', 'pub', '$ch->{url}?database=r1', destination => 'c1',"
		  . " format => 'clickhouse', create_tables => true, enabled => false)");
	$node->safe_psql('postgres',
		"SELECT replicant.add_destination('c', 'c2', '$ch->{url}?database=r2', format => 'clickhouse',"
		  . " create_tables => true)");
	workload();
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('c')");
	ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('c', pg_current_wal_lsn(), 1000)", 180),
		'c: delivered');
	for my $db (qw(r1 r2))
	{
		for my $t (qw(x y))
		{
			is($ch->select_rows("SELECT count() AS n FROM $db.$t FINAL WHERE _deleted = 0")->[0]{n},
				300, "c: $db.$t has every row");
		}
	}
	destinations_clean('c', 'c1: streaming, 0 retries; c2: streaming, 0 retries');
}

done_testing();
