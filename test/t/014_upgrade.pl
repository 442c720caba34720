# ALTER EXTENSION replicant UPDATE under a write workload.
#
# For each earlier version (0.1.0, and 0.2.0, the previous release) the
# extension is installed at that version, in a database of its own, and a
# pipeline streams a pgbench workload; the current library runs against the
# old version's SQL objects until the update.  In the middle of the
# workload ALTER EXTENSION replicant UPDATE runs the upgrade scripts; the
# workload goes on.  Afterwards the sink equals the source (nothing lost),
# the pipeline still streams and its status is readable, the management
# functions work, and the updated objects are those of a fresh installation
# (nothing half-migrated), its grants on the schema kept.  Then an
# uninstall and a reinstall: no old grant survives.
# versions: all (issue #34: the upgrade of 0.2.0 pipelines, on 15, 17 and 18)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('upgrade', conf => 'log_statement = none');

my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'replicant'");
isnt($default, '0.2.0', "the default version ($default) is newer than 0.2.0");

# Installs $from in database $db, streams a workload into a sink of its own,
# updates the extension in the middle of it and checks that nothing was lost
# and that the pipeline works on.
sub upgrade_under_load
{
	my ($from) = @_;
	(my $suffix = $from) =~ s/\.//g;
	my $db       = "from_$suffix";
	my $pipeline = "up$suffix";
	my $sink     = ReplicantTest::start_sink(name => "sink$suffix");
	my $url      = $sink->{url};
	my $poll     = sub { return ReplicantTest::poll($node, $_[0], $_[1], $db); };

	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
CREATE EXTENSION replicant VERSION '$from';
CREATE TABLE kv (id int PRIMARY KEY, v bigint NOT NULL, client int);
CREATE TABLE txn (id bigserial PRIMARY KEY,
    xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint, client int);
CREATE PUBLICATION up_pub FOR TABLE kv, txn;
});
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'replicant'"),
		$from, "installed at $from");
	$node->safe_psql($db,
		"SELECT replicant.create_pipeline('$pipeline', 'up_pub', '$url', batch_max_transactions => 50)");
	$node->safe_psql($db, q{
INSERT INTO kv SELECT g, 0, 0 FROM generate_series(1, 100) g;
INSERT INTO txn (client) VALUES (0);
});
	ok($poll->("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$pipeline'"),
		"$from: the pipeline streams");

	my $script = PostgreSQL::Test::Utils::tempdir() . '/up.sql';
	PostgreSQL::Test::Utils::append_to_file($script, q{
\set a random(1, 100)
\set b random(1, 100)
\set c random(1, 500)
BEGIN;
UPDATE kv SET v = v + 1, client = :client_id WHERE id = :a;
UPDATE kv SET v = v + 1, client = :client_id WHERE id = :b;
INSERT INTO kv VALUES (1000 + :c, 1, :client_id) ON CONFLICT (id) DO UPDATE SET v = kv.v + 1;
INSERT INTO txn (client) VALUES (:client_id);
COMMIT;
});
	my ($out, $err) = ('', '');
	my $load = IPC::Run::start(
		[
			'pgbench', '-n', '-c', '2', '-T', '20', '-R', '150', '--max-tries=50',
			'-f', $script, '-h', $node->host, '-p', $node->port, $db
		],
		'>', \$out, '2>', \$err);

	# Some of the workload is delivered by the old installation first.
	ok($poll->("SELECT count(*) > 200 FROM txn", 60), "$from: the workload runs");
	ok($poll->("SELECT checkpoint_lsn IS NOT NULL FROM replicant.status WHERE pipeline = '$pipeline'", 60),
		"$from: the workload is being delivered");

	$node->safe_psql($db, 'GRANT USAGE ON SCHEMA replicant TO watcher');
	$node->safe_psql($db, 'ALTER EXTENSION replicant UPDATE');
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'replicant'"),
		$default, "$from: updated to $default");
	is($node->safe_psql($db, "SELECT has_schema_privilege('watcher', 'replicant', 'USAGE')"), 't',
		"$from: the update keeps the grants on the schema");
	my $at_update = $node->safe_psql($db, 'SELECT count(*) FROM txn');

	# The pipeline keeps the slot it has, which $from named replicant_<name>:
	# the update re-delivers nothing and loses nothing.
	is($node->safe_psql($db,
			"SELECT s.slot_name || ' ' || r.database || ' ' || (r.confirmed_flush_lsn IS NOT NULL)"
			  . " FROM replicant.status s JOIN pg_replication_slots r USING (slot_name)"
			  . " WHERE s.pipeline = '$pipeline'"),
		"replicant_$pipeline $db true", "$from: the pipeline keeps its slot and status shows it");
	# Its sink options are now those of its one destination, "default",
	# whose checkpoint is the pipeline's (nothing is delivered twice below).
	is($node->safe_psql($db,
			"SELECT string_agg(d.name || ' ' || (d.sink_url = '$url') || ' ' || d.batch_max_transactions"
			  . " || ' ' || (c.destination_id = d.id), ',')"
			  . " FROM replicant.pipelines p JOIN replicant.destinations d ON d.pipeline_id = p.id"
			  . " JOIN replicant.checkpoints c ON c.pipeline_id = p.id WHERE p.name = '$pipeline'"),
		'default true 50 true', "$from: the pipeline has one destination, default, with its options and checkpoint");

	ok($poll->("SELECT count(*) > $at_update + 300 FROM txn", 60),
		"$from: the workload goes on after the update");
	$load->finish;
	is($load->result(0), 0, "$from: pgbench succeeded") or diag($err);

	ok(ReplicantTest::wait_until_synced($node, $db, $sink, [ 'kv', 'txn' ], 120),
		"$from: after the update the sink equals the source");
	is($node->safe_psql($db,
			"SELECT state || '/' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$pipeline'"),
		'streaming/', "$from: the pipeline still streams, without an error");
	# The worker started before the update: its destination's row shows
	# what it delivered, as the pipeline's does (the update has the
	# destination's name mirrored for it).
	ok($poll->("SELECT d.destination = 'default' AND d.transactions_delivered > 0"
			  . " AND (s.state, s.transactions_delivered, s.changes_delivered, s.batches_delivered,"
			  . "      s.bytes_delivered, s.retries, s.checkpoint_lsn)"
			  . "   = (d.state, d.transactions_delivered, d.changes_delivered, d.batches_delivered,"
			  . "      d.bytes_delivered, d.retries, d.checkpoint_lsn)"
			  . " FROM replicant.status s JOIN replicant.destination_status d USING (pipeline)"
			  . " WHERE pipeline = '$pipeline'", 60),
		"$from: destination_status shows the running worker's destination as status shows the pipeline");

	# The management functions of the new version work on the old pipeline.
	$node->safe_psql($db, "SELECT replicant.alter_pipeline('$pipeline', batch_max_transactions => 20)");
	$node->safe_psql($db, 'INSERT INTO txn (client) SELECT 9 FROM generate_series(1, 30)');
	ok($poll->("SELECT replicant.await_delivered('$pipeline', timeout_ms => 1000)", 60),
		"$from: after alter_pipeline, new rows are delivered");
	ok(ReplicantTest::wait_until_synced($node, $db, $sink, [ 'kv', 'txn' ], 60),
		"$from: the sink still equals the source");
	is($sink->stats->{duplicate_transactions}, 0, "$from: nothing was delivered twice");
	like($node->safe_psql($db, 'SELECT * FROM replicant.pipeline_definitions()'),
		qr/^SELECT replicant\.create_pipeline\('$pipeline', '\{up_pub\}'::text\[\], '\Q$url\E', .*batch_max_transactions => 20,[^\n]*format => 'replicant'\);$/m,
		"$from: pipeline_definitions() reads the destination");

	# A pipeline created after the update gets a slot named with the
	# database's OID, beside the old one.
	$node->safe_psql($db, "SELECT replicant.create_pipeline('new$suffix', 'up_pub', '$url')");
	my $new_slot = ReplicantTest::slot_name($node, $db, "new$suffix");
	is($node->safe_psql($db,
			"SELECT slot_name || ' ' || (SELECT database FROM pg_replication_slots r WHERE r.slot_name = s.slot_name)"
			  . " FROM replicant.status s WHERE pipeline = 'new$suffix'"),
		"$new_slot $db", "$from: a new pipeline's slot is named with the database OID");
	$node->safe_psql($db, "SELECT replicant.drop_pipeline('new$suffix')");
	return ($db, $pipeline, $sink);
}

$node->safe_psql('postgres', 'CREATE ROLE watcher');
my @upgraded = map { [ upgrade_under_load($_) ] } ('0.1.0', '0.2.0');

# Nothing half-migrated: the objects equal those of a fresh installation.
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION replicant');
my $objects = q{
SELECT 'function ' || p.oid::regprocedure || ' ' || p.provolatile::text || p.prosecdef::text
       || ' ' || coalesce(p.proconfig::text, '-') || ' ' || coalesce(p.proacl::text, '-')
       || ' ' || pg_get_function_result(p.oid) || ' ' || pg_get_function_arguments(p.oid)
  FROM pg_proc p WHERE p.pronamespace = 'replicant'::regnamespace
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' ' || a.attnotnull || ' ' || a.attidentity::text || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
 WHERE c.relnamespace = 'replicant'::regnamespace
UNION ALL
SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.relacl::text, '-')
       || ' ' || coalesce(pg_get_viewdef(c.oid), '-')
  FROM pg_class c WHERE c.relnamespace = 'replicant'::regnamespace AND c.relkind <> 'S'
UNION ALL
SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'replicant'::regnamespace
UNION ALL
SELECT 'index ' || pg_get_indexdef(indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relnamespace = 'replicant'::regnamespace
ORDER BY 1
};
my $fresh = $node->safe_psql('fresh', $objects);
ok(length($fresh) > 0, 'the fresh installation has objects');
for my $u (@upgraded)
{
	my ($db, $pipeline, $sink) = @$u;
	is($node->safe_psql($db, $objects), $fresh,
		"$db: the updated objects equal those of a fresh installation");
	$node->safe_psql($db, "SELECT replicant.drop_pipeline('$pipeline')");
	is($node->safe_psql($db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'replicant_$pipeline'"),
		'0', "$db: drop_pipeline drops the slot the pipeline kept");
	$sink->stop;
}
# ---- uninstall and reinstall (README: "Uninstall") ---------------------------
# DROP EXTENSION cannot take the schema with it (it is the extension's own
# schema, which PostgreSQL does not let the extension own); a reinstall into
# the schema left behind keeps none of its old grants.
my ($ret, $out, $err) = $node->psql('fresh', 'ALTER EXTENSION replicant ADD SCHEMA replicant');
like($err, qr/cannot add schema "replicant" to extension "replicant" because the schema contains the extension/,
	'the server refuses to make the extension\'s own schema a member');
$node->safe_psql('fresh', q{
CREATE TABLE u (id int PRIMARY KEY);
CREATE PUBLICATION u_pub FOR TABLE u;
GRANT USAGE ON SCHEMA replicant TO watcher;
GRANT SELECT ON replicant.status TO watcher;
});
my $usink = ReplicantTest::start_sink(name => 'uninstall');
$node->safe_psql('fresh', "SELECT replicant.create_pipeline('gone', 'u_pub', '$usink->{url}')");
$node->safe_psql('fresh', 'DROP EXTENSION replicant');
is($node->safe_psql('fresh', "SELECT has_schema_privilege('watcher', 'replicant', 'USAGE')"), 't',
	'after DROP EXTENSION the schema stays, with its grants');
my $gone_slot = ReplicantTest::slot_name($node, 'fresh', 'gone');
ok(ReplicantTest::poll($node,
		"SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = '$gone_slot'"),
	'... its pipelines\' slots go');
$node->safe_psql('fresh', 'CREATE EXTENSION replicant');
is($node->safe_psql('fresh',
		"SELECT has_schema_privilege('watcher', 'replicant', 'USAGE'),"
		  . " has_schema_privilege('replicant_admin', 'replicant', 'USAGE'),"
		  . " has_table_privilege('watcher', 'replicant.status', 'SELECT')"),
	'f|t|f', 'reinstall_no_old_grants: a reinstall keeps none of the old grants, only its own');
is($node->safe_psql('fresh', $objects), $fresh, '... and its objects equal a fresh installation\'s');

$node->safe_psql('fresh', q{
ALTER DEFAULT PRIVILEGES IN SCHEMA replicant GRANT SELECT ON TABLES TO watcher;
DROP EXTENSION replicant;
});
($ret, $out, $err) = $node->psql('fresh', 'CREATE EXTENSION replicant');
like($err, qr/ERROR:  schema "replicant" has default privileges/,
	'a left-over schema with default privileges is refused (its tables would get them)');
like($err, qr/HINT:  Drop the schema left by an earlier installation \(DROP SCHEMA replicant\)/, '... with a hint');
$node->safe_psql('fresh', 'DROP SCHEMA replicant');
$node->safe_psql('fresh', 'CREATE EXTENSION replicant');
is($node->safe_psql('fresh',
		"SELECT count(*) FROM pg_default_acl WHERE defaclnamespace = 'replicant'::regnamespace"),
	'0', 'README\'s uninstall (DROP EXTENSION, DROP SCHEMA) leaves nothing for the next installation');
$usink->stop;

$node->stop;

# ---- an update 2^31 transactions after the installation -------------------------
# The update tells itself from a fresh installation by whether the running
# transaction wrote the extension's dependency on its schema; an update
# taken for an installation would revoke the operator's grants on the
# schema.  pg_resetwal -x moves the next transaction ID on, as days or
# weeks of a busy server do, with the freezing anti-wraparound autovacuum
# does anyway.
my $old = ReplicantTest::new_node('upgrade_xid');
$old->safe_psql('postgres', q{
CREATE EXTENSION replicant VERSION '0.2.0';
CREATE ROLE watcher;
GRANT USAGE ON SCHEMA replicant TO watcher;
});
is($old->safe_psql('postgres', "SELECT has_schema_privilege('watcher', 'replicant', 'USAGE')"),
	't', 'xid: watcher has USAGE on 0.2.0');

# Moves the next transaction ID to $xid, with the commit log segment it needs.
sub jump_xid
{
	my ($xid) = @_;
	$old->stop;
	PostgreSQL::Test::Utils::system_or_bail('pg_resetwal', '-x', $xid, $old->data_dir);
	my $segment = sprintf('%s/pg_xact/%04X', $old->data_dir, $xid >> 20);
	if (!-e $segment)
	{
		open(my $fh, '>', $segment) or die "could not create $segment: $!";
		binmode $fh;
		print $fh "\0" x 262144;
		close $fh;
	}
	$old->start;
	return;
}

# Freezes every database, so that what is older stays visible and the
# wraparound limit moves on.
sub freeze_all
{
	$old->safe_psql('postgres', 'ALTER DATABASE template0 WITH ALLOW_CONNECTIONS true');
	$old->safe_psql($_, 'VACUUM FREEZE')
	  foreach split /\n/, $old->safe_psql('postgres', 'SELECT datname FROM pg_database');
	return;
}

freeze_all();
jump_xid(1430 * 1048576);
freeze_all();
jump_xid(2430 * 1048576);
note('age of the extension->schema dependency: ' . $old->safe_psql('postgres', q{
SELECT age(d.xmin) FROM pg_depend d JOIN pg_extension e ON e.oid = d.objid
 WHERE d.classid = 'pg_extension'::regclass AND d.refclassid = 'pg_namespace'::regclass
   AND e.extname = 'replicant'}));
($ret, $out, $err) = $old->psql('postgres', 'ALTER EXTENSION replicant UPDATE');
is($ret, 0, 'xid: ALTER EXTENSION UPDATE succeeds') or diag($err);
is($old->safe_psql('postgres', "SELECT has_schema_privilege('watcher', 'replicant', 'USAGE')"),
	't', 'fresh_install_detection_wraps: an update 2^31 transactions after the installation keeps the grants on the schema');
$old->stop;
done_testing();
