# Backfill chunk reads keep the fail-closed rules of the snapshot path:
# row-level security the owner does not bypass and a revoked SELECT make
# backfill() refuse the table, and once planned halt the pipeline with a
# value-free reason (never a silently filtered subset marked done, never a
# FATAL restart loop); the owner's statement_timeout does not
# break chunk reads; a citext key is read in the index's order, with cursor
# comparisons of the same operator family, so no row is skipped.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $MARK = 'SECRETVALUE';
my $node = ReplicantTest::new_node('bf_fail_closed');
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE EXTENSION citext;
	CREATE ROLE pipeowner LOGIN;
	GRANT USAGE ON SCHEMA replicant TO pipeowner;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO pipeowner;
	CREATE TABLE rls_t (id int PRIMARY KEY, v text);
	INSERT INTO rls_t SELECT g, '$MARK ' || g FROM generate_series(1, 1000) g;
	CREATE TABLE own_t (id text PRIMARY KEY, v text);
	INSERT INTO own_t SELECT '$MARK' || g, 'x' FROM generate_series(1, 1000) g;
	CREATE TABLE slow_t (id int PRIMARY KEY, v text);
	INSERT INTO slow_t SELECT g, repeat(md5(g::text), 10) FROM generate_series(1, 20000) g;
	GRANT SELECT ON rls_t, own_t, slow_t TO pipeowner;
	CREATE TABLE ci (k citext PRIMARY KEY, n int);
	INSERT INTO ci SELECT CASE WHEN g % 2 = 0 THEN 'a' ELSE 'B' END || lpad(g::text, 5, '0'), g
	  FROM generate_series(1, 6000) g;
	ANALYZE;
	CREATE PUBLICATION rls_pub FOR TABLE rls_t;
	CREATE PUBLICATION own_pub FOR TABLE own_t;
	CREATE PUBLICATION slow_pub FOR TABLE slow_t;
	CREATE PUBLICATION ci_pub FOR TABLE ci;
});

sub create_pipeline
{
	my ($p, $pub, $role) = @_;
	$node->safe_psql('postgres',
		($role ? "SET ROLE $role; " : '')
		  . "SELECT replicant.create_pipeline('$p', '$pub', '$sink->{url}')");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$p: streaming");
}

sub backfill
{
	my ($p, $table, $mode, $role) = @_;
	return $node->safe_psql('postgres',
		($role ? "SET ROLE $role; " : '')
		  . "SELECT replicant.backfill('$p', '$table', mode => '$mode')");
}

# Halts within seconds, its worker gone and not started again.
sub expect_halt
{
	my ($p, $re) = @_;
	ok(ReplicantTest::poll($node,
			"SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = '$p'",
			30),
		"$p: the pipeline halts");
	my $error = $node->safe_psql('postgres',
		"SELECT last_error FROM replicant.status WHERE pipeline = '$p'");
	like($error, $re, "$p: last_error says why");
	unlike($error, qr/\Q$MARK\E/, "$p: last_error holds no row value");
	# Statements are logged (log_statement = all): look at the rest.
	my @log = grep { /^\d{4}-\d\d-\d\d / && !/statement: / } split /\n/,
	  PostgreSQL::Test::Utils::slurp_file($node->logfile);
	is(scalar(grep { /\Q$MARK\E/ } @log), 0, "$p: the server log holds no row value");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'replicant pipeline $p'"),
		'0', "$p: no worker runs");
}

# Plans a backfill while the pipeline is disabled, runs $sql, and enables
# the pipeline: its worker finds the table as $sql left it.
sub backfill_then
{
	my ($p, $table, $sql) = @_;
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('$p')");
	my $id = backfill($p, $table, 'keyset', 'pipeowner');
	$node->safe_psql('postgres', $sql);
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('$p')");
	return $id;
}

# ---- row-level security ------------------------------------------------------
create_pipeline('rls', 'rls_pub', 'pipeowner');
# After create_pipeline, which refuses a table the owner cannot read whole;
# so does backfill, before anything reads it (no policy runs).
$node->safe_psql('postgres', q{
	ALTER TABLE rls_t ENABLE ROW LEVEL SECURITY;
	CREATE POLICY evens ON rls_t FOR SELECT USING (id % 2 = 0);
});
my ($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE pipeowner; SELECT replicant.backfill('rls', 'rls_t', mode => 'keyset')");
like($err, qr/ERROR:  table "rls_t" has row-level security that the pipeline owner does not bypass/,
	'rls: backfill refuses the table');
# Enabled after planning: the worker halts.
$node->safe_psql('postgres', 'ALTER TABLE rls_t DISABLE ROW LEVEL SECURITY');
my $rls = backfill_then('rls', 'rls_t', 'ALTER TABLE rls_t ENABLE ROW LEVEL SECURITY');
expect_halt('rls', qr/^table "rls_t" has row-level security that the pipeline owner does not bypass$/);
isnt($node->safe_psql('postgres', "SELECT state FROM replicant.backfill_status WHERE id = $rls"),
	'done', 'backfill_rls_filtered_subset: the filtered backfill is not recorded as complete');
is(scalar(grep { /"id":\d+/ } split /\n/, $sink->dump('public.rls_t')), 0,
	'rls: no filtered row reached the sink');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rls')");

# ---- SELECT revoked ------------------------------------------------------------
create_pipeline('owned', 'own_pub', 'pipeowner');
$node->safe_psql('postgres', 'REVOKE SELECT ON own_t FROM pipeowner');
($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE pipeowner; SELECT replicant.backfill('owned', 'own_t', mode => 'keyset')");
like($err, qr/ERROR:  pipeline owner has no SELECT privilege on table "own_t"/,
	'revoked: backfill refuses the table');
# Revoked after planning: the worker halts.
$node->safe_psql('postgres', 'GRANT SELECT ON own_t TO pipeowner');
my $owned = backfill_then('owned', 'own_t', 'REVOKE SELECT ON own_t FROM pipeowner');
expect_halt('owned', qr/^pipeline owner has no SELECT privilege on table "own_t"$/);
ok(!$node->log_contains('permission denied for table own_t'),
	'backfill_revoked_select_restart_loop: no FATAL error loop in the log');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('owned')");

# ---- the owner's statement_timeout -------------------------------------------------
$node->safe_psql('postgres', "ALTER ROLE pipeowner SET statement_timeout = '1ms'");
create_pipeline('slow', 'slow_pub', 'pipeowner');
my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'slow'");
my $slow = backfill('slow', 'slow_t', 'ctid', 'pipeowner');
ok($node->poll_query_until('postgres',
		"SELECT state IN ('done') FROM replicant.backfill_status WHERE id = $slow"),
	'backfill_statement_timeout: the backfill finishes despite the owner\'s statement_timeout');
ok(!$node->log_contains('canceling statement due to statement timeout'),
	'statement_timeout: no chunk read was cancelled');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['slow_t'], 60),
	'statement_timeout: the sink equals the source');
$node->safe_psql('postgres', "ALTER ROLE pipeowner RESET statement_timeout");
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('slow')");

# ---- citext key: cursor comparisons in the index's operator family ------------------
create_pipeline('ci', 'ci_pub');
for my $mode ('keyset', 'bitmap')
{
	my $fresh = ReplicantTest::start_sink(name => "ci_$mode");
	$node->safe_psql('postgres',
		"SELECT replicant.alter_pipeline('ci', sink_url => '$fresh->{url}')");
	my $ci = backfill('ci', 'ci', $mode);
	ok($node->poll_query_until('postgres',
			"SELECT state = 'done' FROM replicant.backfill_status WHERE id = $ci"),
		"citext $mode: the backfill finishes");
	is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE id = $ci"),
		'6000', "citext_cursor_operator_mismatch ($mode): each of the 6,000 rows is read once");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $fresh, ['ci'], 30),
		"citext $mode: the sink equals the source");
	$fresh->stop;
}

$sink->stop;

done_testing();
