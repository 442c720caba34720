# An initial snapshot resumed under a fresh snapshot (its shard worker was
# terminated) does not resume a table it had read in part when the table's
# updates can leave TOASTed columns unchanged.  The case it guards against:
# after the first window was read, an update that leaves the TOASTed column
# unchanged moves a row from a block not read yet into the first window.
# Resumed at the second window, the fresh snapshot finds the row in neither
# window, and the stream's update carries no value for the column: the sink
# would keep the row without it.  Read again from its start, the table gives
# the row where it is.
use strict;
use warnings;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('resume_toast', conf => 'autovacuum = off');
my $sink = ReplicantTest::start_sink();

# Rows of about 1 kB, seven to a page, so that 10,500 of them fill some 1,500
# blocks: two snapshot windows of 1,024 blocks.  One row, the mover, has a
# document stored out of line.
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, doc text NOT NULL, pad text NOT NULL);
	ALTER TABLE docs ALTER COLUMN doc SET STORAGE EXTERNAL, ALTER COLUMN pad SET STORAGE PLAIN;
	INSERT INTO docs
	  SELECT g, 0, CASE WHEN g = 8403 THEN repeat(md5(g::text), 100) ELSE 'short' END, repeat('p', 1000)
	    FROM generate_series(1, 10500) g;
	CREATE PUBLICATION pub FOR TABLE docs;
});

sub block_of
{
	my ($id) = @_;
	return $node->safe_psql('postgres',
		"SELECT (ctid::text::point)[0]::int FROM docs WHERE id = $id");
}

# Only block 0 has room for a row: every page holds seven rows (the last
# one too: 10,500 rows), and a row of block 0 is deleted.  INDEX_CLEANUP
# makes VACUUM record block 0's free space (for one dead row it would skip
# the pass that does).
$node->safe_psql('postgres', q{
	DELETE FROM docs WHERE ctid = '(0,1)';
	VACUUM (INDEX_CLEANUP on) docs;
});
is($node->safe_psql('postgres', q{
	SELECT count(*) || ' ' || min(n) || ' ' || max(n) FROM (
	  SELECT (ctid::text::point)[0] AS block, count(*) AS n FROM docs GROUP BY 1) p}),
	'1500 6 7', 'seven rows to a page, six in block 0');
cmp_ok(block_of(8403), '>=', 1024, 'the mover is in the second window');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET replicant.fault_point = 'snapshot_progress:hold';\nSELECT pg_reload_conf();");
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}', snapshot => 'initial',"
	  . " snapshot_workers => 1)");

ok(wait_for_log(qr/fault point "snapshot_progress" reached, holding/, 1),
	'the shard worker holds before the second window');

# The update moves the mover into block 0, read already.
$node->safe_psql('postgres', 'UPDATE docs SET n = 1 WHERE id = 8403');
is(block_of(8403), '0', 'the update moved the mover into the first window');

my $shard_pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'replicant snapshot p'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($shard_pid)");
ok(wait_for_log(qr/resumes its initial snapshot under a fresh snapshot/, 1),
	'the snapshot resumes under a fresh snapshot');
ok(wait_for_log(qr/fault point "snapshot_progress" reached, holding/, 2),
	'the resumed snapshot read a window');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET replicant.fault_point;\nSELECT pg_reload_conf();");

ok(ReplicantTest::poll($node,
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'", 120),
	'the snapshot finishes and the pipeline streams');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['docs'], 60),
	'the sink equals the source');
my ($mover) = grep { /"id":8403\b/ } split /\n/, $sink->dump('public.docs');
like($mover // '', qr/"doc":"[0-9a-f]{3200}"/, 'the moved row has its TOASTed column at the sink');
like(PostgreSQL::Test::Utils::slurp_file($node->logfile),
	qr/reads 1 table read in part again from its start/, 'the table was read again from its start');

# Counts the log lines matching $re, until there are $n of them.
sub wait_for_log
{
	my ($re, $n) = @_;
	foreach (1 .. 1200)
	{
		my @lines = grep { /$re/ } split /\n/, PostgreSQL::Test::Utils::slurp_file($node->logfile);
		return 1 if @lines >= $n;
		usleep(50_000);
	}
	return 0;
}

done_testing();
