# Pipeline lifecycle: two databases, create/disable/enable/drop taking
# effect without a restart, a killed worker coming back, readable process
# names, a quiet pipeline's slot advancing, and the server prerequisites.
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

# Stops replicant asks for end quietly: a LOG line and exit code 0, no FATAL
# "terminating background worker ... due to administrator command" and no
# "exited with exit code 1", for a streaming, a retrying and a snapshotting
# pipeline (whose shard workers stop too), by drop_pipeline,
# disable_pipeline, alter_pipeline and DROP EXTENSION.
my $log_from = -s $node->logfile;
my $slow = ReplicantTest::start_sink(name => 'slow', delay_ms => 100);
$node->safe_psql('postgres', q{
	CREATE TABLE bulk (id int PRIMARY KEY, pad text);
	INSERT INTO bulk SELECT g, repeat('x', 200) FROM generate_series(1, 30000) g;
	CREATE PUBLICATION bulk_pub FOR TABLE bulk;
});
sub state_is
{
	my ($db, $name, $state) = @_;
	return ReplicantTest::poll($node,
		"SELECT state = '$state' FROM replicant.status WHERE pipeline = '$name'", 60, $db);
}
sub no_worker
{
	my ($name) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name IN"
		  . " ('replicant pipeline $name', 'replicant snapshot $name')");
}

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('q_stream', 'items_pub', '$sink->{url}')");
ok(state_is('postgres', 'q_stream', 'streaming'), 'quiet stops: a streaming pipeline');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('q_stream')");
ok(no_worker('q_stream'), '... drop_pipeline stops it');

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('q_retry', 'items_pub', 'http://127.0.0.1:9/', connect_timeout_ms => 500)");
$node->safe_psql('postgres', "INSERT INTO items VALUES (100, 'to nowhere')");
ok(state_is('postgres', 'q_retry', 'retrying'), 'a retrying pipeline');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('q_retry')");
ok(no_worker('q_retry'), '... drop_pipeline stops it');

foreach my $how ('disable', 'alter', 'drop')
{
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('q_snap', 'bulk_pub', '$slow->{url}', snapshot => 'initial',"
		  . " batch_max_bytes => 65536)");
	ok(state_is('postgres', 'q_snap', 'snapshotting'), "a snapshotting pipeline ($how)");
	$node->safe_psql('postgres',
		$how eq 'disable' ? "SELECT replicant.disable_pipeline('q_snap')"
		: $how eq 'alter' ? "SELECT replicant.alter_pipeline('q_snap', batch_max_transactions => 50)"
		:                   "SELECT replicant.drop_pipeline('q_snap')");
	if ($how eq 'alter')
	{
		ok(state_is('postgres', 'q_snap', 'snapshotting'), '... alter_pipeline restarts it');
		$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('q_snap')");
	}
	ok(no_worker('q_snap'), "... $how stops it and its snapshot workers");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('q_snap')") unless $how eq 'drop';
}

$node->safe_psql('second',
	"SELECT replicant.create_pipeline('q_ext', 'items_pub', '$sink2->{url}')");
ok(state_is('second', 'q_ext', 'streaming'), 'a pipeline in a database');
$node->safe_psql('second', 'DROP EXTENSION replicant');
ok(no_worker('q_ext'), '... DROP EXTENSION stops it');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = 'replicant_q_ext'"),
	'... and its slot goes');
my $log = substr(slurp_file($node->logfile), $log_from);
unlike($log, qr/terminating background worker "replicant (pipeline|snapshot)"/,
	'quiet_stop_no_fatal: no FATAL for a stop replicant asked for');
unlike($log, qr/background worker "replicant [a-z ]+" \(PID \d+\) exited with exit code 1/,
	'quiet_stop_exit_zero: no replicant process exits with code 1');
like($log, qr/LOG:  replicant pipeline "q_stream" stopped on request/, '... each stop is one LOG line');
$slow->stop;

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
