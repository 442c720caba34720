# A pipeline halted because its owner lost SELECT must not deliver the rows
# it may not read.
#
#   - REVOKE SELECT, rows inserted, halt; resume_pipeline without a re-grant
#     halts again and delivers none of them; after GRANT and a resume the
#     sink equals the source.
#   - the owner reads the table through a role; REVOKE of the membership
#     halts the pipeline before the rows inserted after it are delivered.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('resume_priv', conf => 'log_statement = none');
my $sink = ReplicantTest::start_sink();
my $url = $sink->{url};

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE rp_t (id int PRIMARY KEY, v text);
CREATE TABLE rp_m (id int PRIMARY KEY, v text);
CREATE PUBLICATION rp_pub FOR TABLE rp_t;
CREATE PUBLICATION rp_pub_m FOR TABLE rp_m;
CREATE ROLE own LOGIN;
CREATE ROLE own2 LOGIN;
CREATE ROLE readers NOLOGIN;
GRANT USAGE ON SCHEMA replicant TO own, own2;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO own, own2;
GRANT SELECT ON rp_t TO own;
GRANT SELECT ON rp_m TO readers;
GRANT readers TO own2;
});

sub poll { return ReplicantTest::poll($node, @_); }

sub state
{
	my ($p) = @_;
	return $node->safe_psql('postgres',
		"SELECT state || ': ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$p'");
}

# Rows of $table at the sink with an id in [$lo, $hi].
sub sunk_between
{
	my ($table, $lo, $hi) = @_;
	my $n = 0;
	foreach my $line (split /\n/, $sink->dump($table))
	{
		$n++ if $line =~ /"id":\s*(\d+)/ && $1 >= $lo && $1 <= $hi;
	}
	return $n;
}

# ---- a revoked SELECT, resumed without a re-grant ---------------------------
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('rp', 'rp_pub', '$url')",
	extra_params => [ '-U', 'own' ]);
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rp'"), 'rp: streaming');
$node->safe_psql('postgres', "INSERT INTO rp_t SELECT g, 'before' FROM generate_series(1, 10) g");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['rp_t'], 60), 'rp: rows before the revoke arrive');

$node->safe_psql('postgres', 'REVOKE SELECT ON rp_t FROM own');
$node->safe_psql('postgres', "INSERT INTO rp_t SELECT g, 'after' FROM generate_series(101, 110) g");
ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'rp'", 30), 'rp: halted after the revoke');
like(state('rp'), qr/no SELECT privilege on table "rp_t"/, 'rp: last_error says why');

$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('rp')");
$node->safe_psql('postgres', "INSERT INTO rp_t SELECT g, 'resumed' FROM generate_series(201, 210) g");
# resume_pipeline clears halt_lsn; a new halt sets it again.
ok(poll("SELECT halt_lsn IS NOT NULL AND halt_reason LIKE '%no SELECT privilege%'"
		  . " FROM replicant.pipelines WHERE name = 'rp'", 30),
	'rp: a resume without a re-grant halts again');
is(sunk_between('public.rp_t', 101, 300), 0, 'rp: no row the owner may not read reached the sink');

$node->safe_psql('postgres', 'GRANT SELECT ON rp_t TO own');
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('rp')");
$node->safe_psql('postgres', "INSERT INTO rp_t VALUES (301, 'granted')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['rp_t'], 60),
	'rp: after the re-grant and a resume, the sink equals the source');
like(state('rp'), qr/^streaming/, 'rp: streaming');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rp')");

# ---- SELECT through a role, membership revoked ------------------------------
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('rm', 'rp_pub_m', '$url')",
	extra_params => [ '-U', 'own2' ]);
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rm'"), 'rm: streaming');
$node->safe_psql('postgres', "INSERT INTO rp_m SELECT g, 'before' FROM generate_series(1, 10) g");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['rp_m'], 60),
	'rm: rows read through the role arrive');

$node->safe_psql('postgres', 'REVOKE readers FROM own2');
$node->safe_psql('postgres', "INSERT INTO rp_m SELECT g, 'after' FROM generate_series(101, 110) g");
ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'rm'", 30),
	'rm: halted after the membership was revoked');
like(state('rm'), qr/no SELECT privilege on table "rp_m"/, 'rm: last_error says why');
is(sunk_between('public.rp_m', 101, 110), 0, 'rm: no row inserted after the revoke reached the sink');

$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('rm')");
ok(poll("SELECT halt_lsn IS NOT NULL AND halt_reason LIKE '%no SELECT privilege%'"
		  . " FROM replicant.pipelines WHERE name = 'rm'", 30),
	'rm: a resume without the membership halts again');
is(sunk_between('public.rp_m', 101, 110), 0, 'rm: still none of them reached the sink');

$node->safe_psql('postgres', 'GRANT readers TO own2');
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('rm')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['rp_m'], 60),
	'rm: after the membership is back and a resume, the sink equals the source');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rm')");

$sink->stop;
$node->stop;
done_testing();
