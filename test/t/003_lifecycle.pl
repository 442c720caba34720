# Pipeline lifecycle: two databases, create/disable/enable/drop taking
# effect without a restart, a killed worker coming back, readable process
# names, a quiet pipeline's slot advancing, and the server prerequisites.
#
# versions: all (slot handling: a quiet pipeline's slot advancing)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('lifecycle', conf => 'restart_after_crash = on');
my $sink = ReplicantTest::start_sink();
my $sink2 = ReplicantTest::start_sink();

for my $db ('postgres', 'second')
{
	$node->safe_psql('postgres', 'CREATE DATABASE second') if $db eq 'second';
	$node->safe_psql($db, q{
		CREATE EXTENSION replicant;
		CREATE TABLE items (id int PRIMARY KEY, db text);
		CREATE TABLE churn (id int PRIMARY KEY, v int);
		CREATE PUBLICATION items_pub FOR TABLE items;
	});
}
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('first_db', 'items_pub', '$sink->{url}')");
$node->safe_psql('second',
	"SELECT replicant.create_pipeline('second_db', 'items_pub', '$sink2->{url}')");

sub worker_pid
{
	my ($db, $name) = @_;
	return $node->safe_psql($db,
		"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = '$name'");
}

ok($node->poll_query_until('postgres',
		"SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'first_db'"),
	'worker starts in the first database without a restart');
ok($node->poll_query_until('second',
		"SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'second_db'"),
	'worker starts in the second database');

is( $node->safe_psql('postgres',
		"SELECT backend_type || '/' || application_name FROM pg_stat_activity"
		  . " WHERE application_name = 'replicant pipeline first_db'"),
	'replicant pipeline/replicant pipeline first_db',
	'worker is named in pg_stat_activity');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'replicant launcher'"),
	'1', 'launcher is running');

# Both databases deliver.
$node->safe_psql('postgres', "INSERT INTO items VALUES (1, 'postgres')");
$node->safe_psql('second', "INSERT INTO items VALUES (1, 'second'), (2, 'second')");
ok(ReplicantTest::wait_until_synced($node, 'second', $sink2, ['items']),
	'second database delivered to its sink');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['items']),
	'first database delivered to its sink');

# A killed worker is restarted (after a throttle), and resumes delivery.
my $pid = worker_pid('postgres', 'first_db');
kill 'KILL', $pid;
# SIGKILL of a backend restarts the whole server; wait for it to come back.
ok(ReplicantTest::poll($node,
		"SELECT coalesce(worker_pid, 0) NOT IN (0, $pid) FROM replicant.status WHERE pipeline = 'first_db'", 180),
	'killed worker comes back');
$pid = worker_pid('postgres', 'first_db');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres',
		"SELECT coalesce(worker_pid, 0) NOT IN (0, $pid) FROM replicant.status WHERE pipeline = 'first_db'"),
	'terminated worker comes back');
$node->safe_psql('postgres', "INSERT INTO items VALUES (2, 'postgres')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['items']),
	'first database delivers after the restarts');

# disable stops the worker within about a second; enable brings it back.
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('first_db')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline first_db'"),
	'disable stops the worker');
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'first_db'"),
	'disabled', 'status says disabled');
$node->safe_psql('postgres', "INSERT INTO items VALUES (3, 'while disabled')");
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('first_db')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'replicant pipeline first_db'"),
	'enable starts the worker');
$node->safe_psql('postgres', "INSERT INTO items VALUES (4, 'after enable')");

# A quiet pipeline's slot advances while unpublished tables churn.
my $before = $node->safe_psql('second',
	"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'replicant_second_db'");
$node->safe_psql('second',
	"INSERT INTO churn SELECT g, g FROM generate_series(1, 5000) g; UPDATE churn SET v = v + 1");
my $churned_to = $node->safe_psql('second', 'SELECT pg_current_wal_lsn()');
ok($node->poll_query_until('second',
		"SELECT confirmed_flush_lsn >= '$churned_to' FROM pg_replication_slots WHERE slot_name = 'replicant_second_db'"),
	"quiet slot advances past unpublished churn ($before -> $churned_to)");

# Tables outside the publication never arrive, in either database.
is($sink->dump('public.churn') . $sink2->dump('public.churn'), '', 'unpublished table never delivered');

# drop stops the worker and removes the slot and the rows.
$node->safe_psql('second', "SELECT replicant.drop_pipeline('second_db')");
is( $node->safe_psql('second',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'replicant_second_db'"),
	'0', 'drop removes the slot');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline second_db'"),
	'drop stops the worker');
is($node->safe_psql('second', 'SELECT count(*) FROM replicant.pipelines'), '0', 'drop removes the row');

# The first database's pipeline delivered everything, including what was
# committed while it was disabled.
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['items']),
	'first database delivered everything across kill, disable and enable');

# Prerequisites: each refused with a hint, nothing created.
my $plain = ReplicantTest::new_node('plain', preload => 0, conf => 'wal_level = replica');
$plain->safe_psql('postgres', 'CREATE EXTENSION replicant; CREATE TABLE t (id int PRIMARY KEY); CREATE PUBLICATION p FOR TABLE t');
my ($ret, $out, $err) = $plain->psql('postgres',
	"SELECT replicant.create_pipeline('x', 'p', 'http://127.0.0.1:9/')");
like($err, qr/replicant is not loaded through "shared_preload_libraries"/, 'not preloaded is refused');
like($err, qr/HINT:  Add "replicant" to "shared_preload_libraries"/, 'with a hint');
$plain->append_conf('postgresql.conf', "shared_preload_libraries = 'replicant'");
$plain->restart;
($ret, $out, $err) = $plain->psql('postgres',
	"SELECT replicant.create_pipeline('x', 'p', 'http://127.0.0.1:9/')");
like($err, qr/replicant requires "wal_level" to be "logical"/, 'wal_level replica is refused');
like($err, qr/HINT:  Set "wal_level = logical"/, 'with a hint');
SKIP:
{
	skip 'server has no output_plugin_libraries', 2
	  unless ReplicantTest::server_has_setting($plain, 'output_plugin_libraries');
	$plain->append_conf('postgresql.conf',
		"wal_level = logical\noutput_plugin_libraries = 'pgoutput'");
	$plain->restart;
	($ret, $out, $err) = $plain->psql('postgres',
		"SELECT replicant.create_pipeline('x', 'p', 'http://127.0.0.1:9/')");
	like($err, qr/"output_plugin_libraries" does not list "replicant"/,
		'output_plugin_libraries without replicant is refused');
	like($err, qr/HINT:  Add "replicant" to "output_plugin_libraries"/, 'with a hint');
}
is($plain->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM replicant.pipelines) + (SELECT count(*) FROM pg_replication_slots)"),
	'0', 'refused calls left nothing behind');

done_testing();
