# replicant_admin: the extension refuses one it cannot trust; a role that is
# only a member of it can manage its own pipelines and read the views (not
# the path of another's sink URL); create_pipeline refuses tables the owner
# cannot read and warns about tables without a replica identity.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('admin');
my $sink = ReplicantTest::start_sink();

# ---- a replicant_admin made before the extension, by a CREATEROLE holder ----
# Roles are cluster-wide: whoever may create roles can make replicant_admin
# first and keep control of its membership (on 16 and later its creator
# holds ADMIN OPTION on it).  0.2.0 granted the management functions to it
# all the same; installing or updating to 0.3.0 refuses it.
$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN CREATEROLE;
	SET ROLE mallory;
	CREATE ROLE replicant_admin NOLOGIN;
	GRANT replicant_admin TO mallory;
	RESET ROLE;
	CREATE DATABASE old;
});
$node->safe_psql('old', q{CREATE EXTENSION replicant VERSION '0.2.0'});
my ($ret, $out, $err) = $node->psql('old', 'ALTER EXTENSION replicant UPDATE');
like($err, qr/ERROR:  role "replicant_admin" is not safe to grant replicant's management functions to/,
	'ALTER EXTENSION UPDATE refuses a replicant_admin whose membership a CREATEROLE holder controls');
is($node->safe_psql('old', "SELECT extversion FROM pg_extension WHERE extname = 'replicant'"),
	'0.2.0', '... and leaves the installation at 0.2.0');
($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION replicant');
like($err, qr/ERROR:  role "replicant_admin" is not safe to grant replicant's management functions to/,
	'CREATE EXTENSION refuses it too');
like($err, qr/DETAIL:  Role "mallory" is a member of it by the grant of a role that is not a superuser, or holds ADMIN OPTION on it\./,
	'... naming the member');
$node->safe_psql('postgres', 'DROP DATABASE old');
$node->safe_psql('postgres', q{
	SET ROLE mallory;
	DROP ROLE replicant_admin;
	CREATE ROLE replicant_admin LOGIN PASSWORD 'mallory';
	RESET ROLE;
});
($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION replicant');
like($err, qr/DETAIL:  The role can log in or has role attributes\./,
	'CREATE EXTENSION refuses a replicant_admin that can log in');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_extension WHERE extname = 'replicant'"),
	'0', '... installing nothing');
$node->safe_psql('postgres', 'DROP ROLE replicant_admin');

# A replicant_admin a superuser made, with members a superuser granted, is
# accepted (as by every other test).
$node->safe_psql('postgres', q{
	CREATE ROLE replicant_admin NOLOGIN;
	CREATE ROLE dave LOGIN;
	GRANT replicant_admin TO dave;
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY);
	CREATE TABLE nokey (id int);
	CREATE TABLE hidden (id int PRIMARY KEY);
	CREATE PUBLICATION pub FOR TABLE t;
	CREATE PUBLICATION pub_nokey FOR TABLE nokey;
	CREATE PUBLICATION pub_hidden FOR TABLE hidden;
	CREATE ROLE alice LOGIN;
	GRANT replicant_admin TO alice;
	GRANT SELECT ON t, nokey TO alice;
	CREATE ROLE bob LOGIN;
	CREATE ROLE carol LOGIN;
	GRANT replicant_admin TO carol;
});

# README's SQL reference says what replicant_admin holds, "exactly": the
# functions it lists and SELECT on the two views.  Compared with the grants.
{
	my $readme = slurp_file("$FindBin::RealBin/../../README.md");
	my ($held) = $readme =~ /`replicant_admin` \(created by the extension.*?holds exactly (.*?)\. So a superuser/s;
	ok(defined $held, 'README: the paragraph of what replicant_admin holds');
	my ($functions) = ($held // '') =~ /EXECUTE` on every management function\s*\((.*?)\)\s*and/s;
	my %listed = map { $_ => 1 } (($functions // '') =~ /`(\w+)`/g);
	my $granted = $node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT p.proname, ',' ORDER BY p.proname)
		  FROM pg_proc p, aclexplode(p.proacl) a
		 WHERE p.pronamespace = 'replicant'::regnamespace
		   AND a.grantee = 'replicant_admin'::regrole AND a.privilege_type = 'EXECUTE'});
	is($granted, join(',', sort keys %listed),
		'README lists exactly the functions replicant_admin may execute');
	is($node->safe_psql('postgres', q{
		SELECT string_agg(c.relname, ',' ORDER BY c.relname)
		  FROM pg_class c, aclexplode(c.relacl) a
		 WHERE c.relnamespace = 'replicant'::regnamespace
		   AND a.grantee = 'replicant_admin'::regrole}),
		join(',', sort(($held // '') =~ /`replicant\.(\w+)`/g)),
		'README lists exactly the relations replicant_admin holds privileges on');
}
is($node->safe_psql('postgres',
	"SELECT rolcanlogin FROM pg_roles WHERE rolname = 'replicant_admin'"),
	'f', 'replicant_admin exists and cannot log in');

sub as_alice
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, extra_params => [ '-U', 'alice' ]);
	return ($ret, $out, $err);
}

($ret, $out, $err) = as_alice(
	"SELECT replicant.create_pipeline('a', 'pub', '$sink->{url}')");
is($ret, 0, 'a member of replicant_admin creates a pipeline') or diag($err);
($ret, $out, $err) = as_alice(
	"SELECT pipeline, state IS NOT NULL FROM replicant.status");
is($ret, 0, 'and reads replicant.status without EXECUTE on its internals') or diag($err);
is($out, 'a|t', 'replicant.status shows the pipeline');
ok(ReplicantTest::poll($node,
	"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'a'"), 'it streams');
$node->safe_psql('postgres', 'INSERT INTO t VALUES (1)');
($ret, $out, $err) = as_alice("SELECT replicant.await_delivered('a', pg_current_wal_lsn(), 60000)");
is($out, 't', 'await_delivered') or diag($err);

# Another member of replicant_admin reads the status of every pipeline, but
# not the path and query of a sink URL that is not its own (tokens often live
# there), and cannot wait on another's pipeline.
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('a', sink_url => '$sink->{url}?token=s3cr3t')");
(my $origin = $sink->{url}) =~ s{^(\w+://[^/?#]+).*}{$1};
($ret, $out, $err) = $node->psql('postgres', "SELECT sink_url FROM replicant.status WHERE pipeline = 'a'",
	extra_params => [ '-U', 'carol' ]);
is($out, $origin, "another member sees only scheme://host:port of alice's sink URL") or diag($err);
($ret, $out, $err) = as_alice("SELECT sink_url FROM replicant.status WHERE pipeline = 'a'");
is($out, "$sink->{url}?token=s3cr3t", 'alice sees her whole sink URL');
($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.await_delivered('a', timeout_ms => 0)",
	extra_params => [ '-U', 'carol' ]);
like($err, qr/must be owner of pipeline "a"/, "another member cannot await_delivered on alice's pipeline");
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('a', sink_url => '$sink->{url}')");

foreach my $call (
	"replicant.alter_pipeline('a', batch_max_transactions => 100)",
	"replicant.disable_pipeline('a')",
	"replicant.enable_pipeline('a')",
	"replicant.resume_pipeline('a')",
	"replicant.backfill('a', 't')",
	"replicant.pipeline_definitions()",
	"replicant.generate_secret()",
	"replicant.resync_pipeline('a')")
{
	($ret, $out, $err) = as_alice("SELECT $call");
	is($ret, 0, "a member of replicant_admin calls $call") or diag($err);
}
($ret, $out, $err) = as_alice('SELECT count(*) FROM replicant.backfill_status');
is($ret, 0, 'and reads replicant.backfill_status') or diag($err);

($ret, $out, $err) = as_alice('SELECT count(*) FROM replicant.pipelines');
isnt($ret, 0, 'the catalog holding secrets stays private');
like($err, qr/permission denied for table pipelines/, '... permission denied');
($ret, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM replicant.status',
	extra_params => [ '-U', 'bob' ]);
isnt($ret, 0, 'a role outside replicant_admin cannot read replicant.status');
($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('b', 'pub', '$sink->{url}')",
	extra_params => [ '-U', 'bob' ]);
like($err, qr/permission denied for schema replicant/, 'nor create pipelines');

# Checked up front, not at the table's first change.
($ret, $out, $err) = as_alice(
	"SELECT replicant.create_pipeline('h', 'pub_hidden', '$sink->{url}')");
isnt($ret, 0, 'create_pipeline refuses a table its owner cannot read');
like($err, qr/role "alice" cannot read published table "hidden"/, '... and names it');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM replicant.pipelines WHERE name = 'h'"), '0', '... leaving nothing behind');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_replication_slots WHERE slot_name ~ '^replicant[0-9]*_h\$'"), '0', '... no slot either');

($ret, $out, $err) = as_alice(
	"SELECT replicant.create_pipeline('k', 'pub_nokey', '$sink->{url}')");
is($ret, 0, 'a table without replica identity is accepted') or diag($err);
like($err, qr/WARNING:  table "public.nokey" is published for updates or deletes but has no replica identity/,
	'... with a warning');
($ret, $out, $err) = as_alice(
	"SELECT replicant.create_pipeline('k2', 'pub', '$sink->{url}')");
unlike($err, qr/WARNING/, 'no warning for a table with a primary key');

foreach my $p ('a', 'k', 'k2')
{
	($ret, $out, $err) = as_alice("SELECT replicant.drop_pipeline('$p')");
	is($ret, 0, "a member of replicant_admin drops pipeline $p") or diag($err);
}


# ---- a schema "replicant" made before the extension by a role that is not a superuser ----
# Any role with CREATE on the database can make it (and README's Uninstall
# has the schema dropped).  Its owner could rename it and put its own
# replicant.pipelines, with a trigger, where replicant's sync worker (the
# bootstrap superuser) reads and writes it.
$node->safe_psql('postgres', 'CREATE ROLE eve LOGIN; CREATE DATABASE evedb OWNER eve');
$node->safe_psql('evedb', 'SET ROLE eve; CREATE SCHEMA replicant');
($ret, $out, $err) = $node->psql('evedb', 'CREATE EXTENSION replicant');
like($err, qr/ERROR:  schema "replicant" is owned by role "eve", which is not a superuser/,
	'schema_owner: CREATE EXTENSION refuses a schema "replicant" owned by a role that is not a superuser');
like($err, qr/HINT:  Drop the schema \(DROP SCHEMA replicant\) before CREATE EXTENSION replicant/, '... with a hint');
is($node->safe_psql('evedb',
		"SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'replicant')"
		  . " + (SELECT count(*) FROM pg_class WHERE relnamespace = 'replicant'::regnamespace)"
		  . " + (SELECT count(*) FROM pg_proc WHERE pronamespace = 'replicant'::regnamespace)"),
	'0', '... and leaves nothing behind');
$node->safe_psql('evedb', 'DROP EXTENSION replicant') if $ret == 0;

# 0.2.0's scripts did not look: an installation at 0.2.0 in such a schema
# is refused its update, and the library does not run its queries there.
$node->safe_psql('evedb', "CREATE EXTENSION replicant VERSION '0.2.0'");
($ret, $out, $err) = $node->psql('evedb', 'ALTER EXTENSION replicant UPDATE');
like($err, qr/ERROR:  schema "replicant" is owned by role "eve", which is not a superuser/,
	'schema_owner: ALTER EXTENSION UPDATE refuses it too');
$node->safe_psql('evedb', q{
SET ROLE eve;
ALTER SCHEMA replicant RENAME TO replicant_moved;
CREATE SCHEMA replicant;
CREATE TABLE replicant.pipelines (id int, name text, owner oid, enabled boolean,
    halt_reason text, config_version int, slot_name name);
CREATE FUNCTION replicant.pwn() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN EXECUTE 'ALTER ROLE eve SUPERUSER'; RETURN NEW; END$$;
CREATE TRIGGER pwn BEFORE UPDATE ON replicant.pipelines
    FOR EACH ROW EXECUTE FUNCTION replicant.pwn();
INSERT INTO replicant.pipelines VALUES (1, 'x', 0, true, NULL, 1, 'replicant_x');
});
# Any restart has the launcher sync every database, as the bootstrap superuser.
my $log_from = -s $node->logfile;
$node->restart;
my $refused = qr/schema "replicant" is not the schema of extension "replicant"/;
my $eve_super = 'f';
foreach (1 .. 600)
{
	$eve_super = $node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'eve'");
	last if $eve_super eq 't' || substr(slurp_file($node->logfile), $log_from) =~ $refused;
	usleep(100_000);
}
is($eve_super, 'f', 'schema_owner_escalation: the owner of a schema that took replicant\'s name does not become superuser');
like(substr(slurp_file($node->logfile), $log_from), $refused, '... the sync worker refuses to read it, and says why');

$node->stop;
$sink->stop;
done_testing();
