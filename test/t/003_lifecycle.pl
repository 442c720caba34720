# Pipeline lifecycle: two databases, create/disable/enable/drop taking
# effect without a restart, a killed worker coming back, readable process
# names, a quiet pipeline's slot advancing, quiet stops, a sync racing
# drop_pipeline, and the server prerequisites.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
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
my $second_slot = $node->safe_psql('second',
	"SELECT slot_name FROM replicant.status WHERE pipeline = 'second_db'");
my $before = $node->safe_psql('second',
	"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$second_slot'");
$node->safe_psql('second',
	"INSERT INTO churn SELECT g, g FROM generate_series(1, 5000) g; UPDATE churn SET v = v + 1");
my $churned_to = $node->safe_psql('second', 'SELECT pg_current_wal_lsn()');
ok($node->poll_query_until('second',
		"SELECT confirmed_flush_lsn >= '$churned_to' FROM pg_replication_slots WHERE slot_name = '$second_slot'"),
	"quiet slot advances past unpublished churn ($before -> $churned_to)");

# Tables outside the publication never arrive, in either database.
is($sink->dump('public.churn') . $sink2->dump('public.churn'), '', 'unpublished table never delivered');

# drop stops the worker and removes the slot and the rows.
$node->safe_psql('second', "SELECT replicant.drop_pipeline('second_db')");
is( $node->safe_psql('second',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$second_slot'"),
	'0', 'drop removes the slot');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline second_db'"),
	'drop stops the worker');
is($node->safe_psql('second', 'SELECT count(*) FROM replicant.pipelines'), '0', 'drop removes the row');

# The first database's pipeline delivered everything, including what was
# committed while it was disabled.
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['items']),
	'first database delivered everything across kill, disable and enable');

# ---- slot names are cluster-wide, pipeline names per database ----------------
# A pipeline of the same name in each database gets a slot of its own (named
# with its database's OID): B never adopts A's slot, and dropping B's
# pipeline leaves A's alone.  A is disabled meanwhile, so that its slot is
# free for B to take if B would.
my ($ret, $out, $err);
for my $db ('postgres', 'second')
{
	$node->safe_psql($db,
		'CREATE TABLE same (id int PRIMARY KEY, db text); CREATE PUBLICATION same_pub FOR TABLE same');
}
my $sink_a = ReplicantTest::start_sink(name => 'sink_same_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_same_b');
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('same', 'same_pub', '$sink_a->{url}')");
$node->safe_psql('postgres', "INSERT INTO same VALUES (1, 'a')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, ['same']), 'same name: A streams');
my $oid_a = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'postgres'");
my $oid_b = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'second'");
is($node->safe_psql('postgres', "SELECT slot_name FROM replicant.status WHERE pipeline = 'same'"),
	"replicant_${oid_a}_same", 'same name: the slot is named with the database OID');
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('same')");
ok(ReplicantTest::poll($node, "SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'same'"),
	'same name: A disabled');
$node->safe_psql('postgres', "INSERT INTO same VALUES (2, 'a, while disabled')");

$node->safe_psql('second', "INSERT INTO same VALUES (1, 'b')");
($ret, $out, $err) = $node->psql('second',
	"SELECT replicant.create_pipeline('same', 'same_pub', '$sink_b->{url}', snapshot => 'initial')");
is($ret, 0, 'same name: B creates a pipeline of the same name') or diag($err);
$node->safe_psql('second', "INSERT INTO same VALUES (2, 'b')");
ok(ReplicantTest::wait_until_synced($node, 'second', $sink_b, ['same'], 60),
	'same name: B streams its own rows');
is($node->safe_psql('second', "SELECT slot_name FROM replicant.status WHERE pipeline = 'same'"),
	"replicant_${oid_b}_same", 'same name: B has its own slot');
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'same'",
		undef, 'second'),
	'same name: B streams after its initial snapshot');
$node->safe_psql('second', "SELECT replicant.drop_pipeline('same')");
is($node->safe_psql('postgres',
		"SELECT database FROM pg_replication_slots WHERE slot_name = 'replicant_${oid_a}_same'"),
	'postgres', "same name: dropping B's pipeline leaves A's slot");

$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('same')");
$node->safe_psql('postgres', "INSERT INTO same VALUES (3, 'a')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, ['same'], 60),
	'same name: A streams on, nothing lost while it was disabled');
is($node->safe_psql('postgres', "SELECT state || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'same'"),
	'streaming', 'same name: A is not halted');
is($sink_a->dump('public.same') =~ tr/\n//, 3, "same name: A's sink has only A's rows");
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('same')");
$sink_a->stop;
$sink_b->stop;

# A 48-character name beside a 5-digit database OID does not fit in a slot
# name (63 bytes): it keeps its start and gets a hash of the whole name.
my $long = 'l' x 40 . '_0123456';
$node->safe_psql('second', "SELECT replicant.create_pipeline('$long', 'same_pub', '$sink2->{url}')");
my $long_slot = $node->safe_psql('second', "SELECT slot_name FROM replicant.status WHERE pipeline = '$long'");
like($long_slot, qr/^replicant_${oid_b}_l{38}_[0-9a-f]{8}$/, 'long name: the slot name keeps its start and a hash');
is(length($long_slot), 63, 'long name: and fits in a name');
is($node->safe_psql('second', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$long_slot' AND database = 'second'"),
	'1', 'long name: the slot exists');
$node->safe_psql('second', "SELECT replicant.drop_pipeline('$long')");
is($node->safe_psql('second', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$long_slot'"),
	'0', 'long name: drop_pipeline drops it');

# ---- a slot of the pipeline's name that is not the pipeline's ----------------
# A slot of another plugin in this database, or one of another database, that
# carries the name a pipeline's slot has: never decoded, adopted or dropped.
sub slot_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT database || ' ' || plugin FROM pg_replication_slots WHERE slot_name = '$name'");
}
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('alien', 'same_pub', '$sink->{url}')");
my $alien = $node->safe_psql('postgres', "SELECT slot_name FROM replicant.status WHERE pipeline = 'alien'");
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('alien')");
ok(ReplicantTest::poll($node,
		"SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$alien'"),
	'foreign slot: the pipeline let go of its slot');
$node->safe_psql('postgres',
	"SELECT pg_drop_replication_slot('$alien'); SELECT pg_create_logical_replication_slot('$alien', 'test_decoding')");
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('alien')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'alien'"),
	'foreign slot: a pipeline finding a test_decoding slot of its name halts');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'alien'"),
	qr/^replication slot "\Q$alien\E" is not this pipeline's: it belongs to another database or output plugin/,
	'foreign slot: and says why');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('alien')");
is(slot_of($alien), 'postgres test_decoding', 'foreign slot: drop_pipeline leaves the test_decoding slot');
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$alien')");

# The same name, taken by a pgoutput slot of the other database.
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('alien', 'same_pub', '$sink->{url}')");
$alien = $node->safe_psql('postgres', "SELECT slot_name FROM replicant.status WHERE pipeline = 'alien'");
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('alien')");
$node->safe_psql('second', "SELECT pg_create_logical_replication_slot('$alien', 'pgoutput')");
for my $snapshot ('none', 'initial')
{
	($ret, $out, $err) = $node->psql('postgres',
		"SELECT replicant.create_pipeline('alien', 'same_pub', '$sink->{url}', snapshot => '$snapshot')");
	like($err, qr/replication slot "\Q$alien\E" already exists/,
		"foreign slot: create_pipeline (snapshot $snapshot) refuses another database's slot of its name");
	$node->psql('postgres', "SELECT replicant.drop_pipeline('alien')") if $ret == 0;
}
is(slot_of($alien), 'second pgoutput', "foreign slot: the other database's slot is left alone");
$node->safe_psql('second', "SELECT pg_drop_replication_slot('$alien')");
# Stops replicant asks for end quietly: a LOG line and exit code 0, no FATAL
# "terminating background worker ... due to administrator command" and no
# "exited with exit code 1", for a streaming, a retrying and a snapshotting
# pipeline (whose shard workers stop too), by drop_pipeline,
# disable_pipeline, alter_pipeline, cancel_backfill() and DROP EXTENSION.
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

# cancel_backfill() (as backfill()) while the initial snapshot is read
# restarts the worker, which the launcher terminates (it cannot stop where it
# chooses): told the stop is replicant's, it ends quietly too.
$node->safe_psql('postgres', q{
	CREATE TABLE few (id int PRIMARY KEY);
	INSERT INTO few SELECT generate_series(1, 10);
	CREATE PUBLICATION few_bulk_pub FOR TABLE few, bulk;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('q_bf', 'few_bulk_pub', '$slow->{url}', snapshot => 'initial',"
	  . " batch_max_bytes => 65536)");
ok(ReplicantTest::poll($node,
		"SELECT count(*) = 1 FROM replicant.backfill_status b JOIN replicant.status s ON s.pipeline = b.pipeline"
		  . " WHERE b.relation = 'bulk'::regclass AND b.rows_done > 0 AND s.state = 'snapshotting'"),
	'a snapshotting pipeline (cancel_backfill)');
my $snap_pid = worker_pid('postgres', 'q_bf');
$node->safe_psql('postgres',
	"SELECT replicant.cancel_backfill(id) FROM replicant.backfill_status"
	  . " WHERE pipeline = 'q_bf' AND relation = 'few'::regclass");
ok(ReplicantTest::poll($node,
		"SELECT worker_pid IS DISTINCT FROM $snap_pid AND worker_pid IS NOT NULL FROM replicant.status"
		  . " WHERE pipeline = 'q_bf'"),
	'... cancel_backfill() restarts it');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('q_bf')");
ok(no_worker('q_bf'), '... and drop_pipeline stops it');

# drop_pipeline deletes the row, stops the worker, then drops the slot.  A
# sync that reads the row before the delete commits (another pipeline's
# change asks for one) must not have the launcher start the pipeline again:
# the new worker would hold the slot, and the drop wait for it for ever.
# The fault point drop_pipeline:hold holds the drop between the stop and the
# slot's drop while such a sync runs.
{
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('q_race', 'items_pub', '$sink->{url}')");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('q_other', 'items_pub', '$sink->{url}')");
	ok(state_is('postgres', 'q_race', 'streaming'), 'drop race: a streaming pipeline');
	ok(state_is('postgres', 'q_other', 'streaming'), '... and another');
	my $from = -s $node->logfile;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET replicant.fault_point = 'drop_pipeline:hold'; SELECT pg_reload_conf();");
	my ($in, $out, $err) = ('', '', '');
	my $drop = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-h', $node->host, '-p', $node->port,
		  '-d', 'postgres', '-c', "SELECT replicant.drop_pipeline('q_race')" ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my $held = 0;
	foreach (1 .. 1200)
	{
		last if ($held = (slurp_file($node->logfile, $from) =~ /fault point "drop_pipeline" reached, holding/));
		usleep(50_000);
	}
	ok($held, 'drop race: drop_pipeline holds after stopping the worker');
	ok(no_worker('q_race'), '... whose worker is gone');
	# Syncs of this database, and the launcher's rounds after them: another
	# pipeline disabled, then enabled again (creating one would wait for the
	# drop's transaction, as every new slot waits for running transactions).
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('q_other')");
	ok(state_is('postgres', 'q_other', 'disabled'), 'drop race: another pipeline disabled meanwhile');
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('q_other')");
	ok(state_is('postgres', 'q_other', 'streaming'), '... and enabled again');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'replicant pipeline q_race'"),
		'0', 'drop race: no worker of the pipeline being dropped was started again');
	$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();");
	my $done = eval { $drop->finish; 1 };
	$done = 0 unless $done && $drop->result == 0;
	$drop->kill_kill unless $done;
	ok($done, 'drop race: drop_pipeline returns') or diag("drop_pipeline: $err");
	unlike(slurp_file($node->logfile, $from), qr/replicant pipeline "q_race" streaming from/,
		'drop race: no worker streamed for it after the drop began');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE '%q_race'"),
		'0', 'drop race: its slot is gone');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('q_other')");
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
($ret, $out, $err) = $plain->psql('postgres',
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
