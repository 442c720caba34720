# Pipeline lifecycle: two databases, create/disable/enable/drop taking
# effect without a restart, a killed worker coming back, readable process
# names, a quiet pipeline's slot advancing, quiet stops, a sync racing
# drop_pipeline, and the server prerequisites.
#
# versions: all (slot handling: a quiet pipeline's slot advancing)
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
	"replicant${oid_a}_same", 'same name: the slot is named with the database OID');
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
	"replicant${oid_b}_same", 'same name: B has its own slot');
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'same'",
		undef, 'second'),
	'same name: B streams after its initial snapshot');
$node->safe_psql('second', "SELECT replicant.drop_pipeline('same')");
is($node->safe_psql('postgres',
		"SELECT database FROM pg_replication_slots WHERE slot_name = 'replicant${oid_a}_same'"),
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
# name (replicant<OID>_<name>, 63 bytes at most): it keeps its start and
# gets a hash of the whole name.
my $long = 'l' x 40 . '_0123456';
$node->safe_psql('second', "SELECT replicant.create_pipeline('$long', 'same_pub', '$sink2->{url}')");
my $long_slot = $node->safe_psql('second', "SELECT slot_name FROM replicant.status WHERE pipeline = '$long'");
like($long_slot, qr/^replicant${oid_b}_l{39}_[0-9a-f]{8}$/, 'long name: the slot name keeps its start and a hash');
is(length($long_slot), 63, 'long name: and fits in a name');
is($node->safe_psql('second', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$long_slot' AND database = 'second'"),
	'1', 'long name: the slot exists');
$node->safe_psql('second', "SELECT replicant.drop_pipeline('$long')");
is($node->safe_psql('second', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$long_slot'"),
	'0', 'long name: drop_pipeline drops it');
# One byte shorter it fits as it is (62 bytes: a hashed name has 63, so the
# two never meet).
my $fits = 'm' x 47;
$node->safe_psql('second', "SELECT replicant.create_pipeline('$fits', 'same_pub', '$sink2->{url}', enabled => false)");
is($node->safe_psql('second', "SELECT slot_name FROM replicant.status WHERE pipeline = '$fits'"),
	"replicant${oid_b}_$fits", 'a name that fits: the slot name is replicant<database OID>_<name>');
$node->safe_psql('second', "SELECT replicant.drop_pipeline('$fits')");

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
# Its worker holds the slot first: disabled before it took it, the slot
# looks let go until the worker takes it on its way to the stop.
ok(state_is('postgres', 'alien', 'streaming'), 'foreign slot: the pipeline streams');
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

# ---- a slot that someone dropped ----------------------------------------------
# The halt says what may have happened, the promoted standby being only one
# of the possibilities.
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('dropped', 'same_pub', '$sink->{url}')");
my $dropped = $node->safe_psql('postgres', "SELECT slot_name FROM replicant.status WHERE pipeline = 'dropped'");
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('dropped')");
ok(ReplicantTest::poll($node, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$dropped'"),
	'dropped slot: the pipeline let go of its slot');
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$dropped')");
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('dropped')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'dropped'"),
	'dropped slot: the pipeline halts');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'dropped'"),
	qr/^replication slot "\Q$dropped\E" does not exist \(it was dropped, or this server is a promoted standby that had no failover copy of it\): recreate the pipeline with a snapshot$/,
	'missing_slot_reason: the halt names a standby as one possible cause, not the only one');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('dropped')");

# ---- drop_pipeline drops the slot it acquired, never one made in its place ----
# Between drop_pipeline's first look at its slot (replicant's, of this
# database) and the drop, someone with REPLICATION may drop the slot and
# make another of that name (a physical one here: a logical slot waits for
# drop_pipeline's transaction to end before it is made).  The fault point
# slot_drop holds drop_pipeline right after that look.
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('swap', 'same_pub', '$sink->{url}')");
my $swap = $node->safe_psql('postgres', "SELECT slot_name FROM replicant.status WHERE pipeline = 'swap'");
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('swap')");
ok(ReplicantTest::poll($node, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$swap'"),
	'swapped slot: the pipeline let go of its slot');
my $hold_from = -s $node->logfile;
$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'slot_drop:hold'; SELECT pg_reload_conf()");
my ($drop_out, $drop_err) = ('', '');
my $dropper = IPC::Run::start(
	[ 'psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
	  '-c', "SELECT replicant.drop_pipeline('swap')" ],
	'>', \$drop_out, '2>', \$drop_err);
$node->wait_for_log(qr/fault point "slot_drop" reached, holding/, $hold_from);
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$swap')");
$node->safe_psql('postgres', "SELECT pg_create_physical_replication_slot('$swap')");
$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()');
$dropper->finish;
like($drop_err, qr/WARNING:  replication slot "\Q$swap\E" was left in place/,
	'slot_drop_toctou: drop_pipeline leaves the slot made in its slot\'s place, with a WARNING');
is($node->safe_psql('postgres', "SELECT slot_type FROM pg_replication_slots WHERE slot_name = '$swap'"),
	'physical', '... and that slot is still there');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.pipelines WHERE name = 'swap'"),
	'0', '... and the pipeline is gone');
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$swap')");

# ---- slot names of 0.3.0 and of the pipelines before it never meet ------------
# Pipelines created before 0.3.0, and all of a database still at 0.2.0's SQL
# objects (each database is updated on its own), have the slot
# replicant_<name>.  A pipeline name may be "<digits>_<rest>", so a slot
# name of 0.3.0 is one the old scheme cannot produce: a role allowed to
# manage pipelines only in such a database cannot take the slot name of
# another database's pipeline.
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
for my $db ('old_a', 'old_b')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
		CREATE EXTENSION replicant VERSION '0.2.0';
		CREATE TABLE t (id int PRIMARY KEY);
		CREATE PUBLICATION pub FOR TABLE t;
	});
}
$node->safe_psql('old_a', 'GRANT replicant_admin TO mallory; GRANT SELECT ON t TO mallory');
($ret, $out, $err) = $node->psql('old_a',
	"SELECT replicant.create_pipeline('${oid_a}_orders', 'pub', '$sink->{url}')",
	extra_params => [ '-U', 'mallory' ]);
is($ret, 0, "legacy names: mallory creates pipeline ${oid_a}_orders in a database at 0.2.0") or diag($err);
is(slot_of("replicant_${oid_a}_orders"), 'old_a replicant', "... whose slot is replicant_${oid_a}_orders");
($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('orders', 'same_pub', '$sink->{url}')");
is($ret, 0, "legacy_name_squat: database postgres still creates its own pipeline 'orders'") or diag($err);
is($node->safe_psql('postgres', "SELECT slot_name FROM replicant.status WHERE pipeline = 'orders'"),
	"replicant${oid_a}_orders", '... with the slot replicant<database OID>_orders');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('orders')");
$node->safe_psql('old_a', "SELECT replicant.drop_pipeline('${oid_a}_orders')");

# Between those old names, a replicant slot of another database may carry a
# pipeline's slot name: B's pipeline "shared" lost its slot, and A made a
# pipeline "shared".  B's worker never decodes A's slot, and B's
# drop_pipeline leaves it.
my $sink_old = ReplicantTest::start_sink(name => 'sink_old');
$node->safe_psql('old_b', "SELECT replicant.create_pipeline('shared', 'pub', '$sink2->{url}')");
$node->safe_psql('old_b', "SELECT replicant.disable_pipeline('shared')");
ok(ReplicantTest::poll($node, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'replicant_shared'"),
	"foreign replicant slot: B's worker let go of its slot");
$node->safe_psql('old_b', "SELECT pg_drop_replication_slot('replicant_shared')");
$node->safe_psql('old_a', "SELECT replicant.create_pipeline('shared', 'pub', '$sink_old->{url}')");
is(slot_of('replicant_shared'), 'old_a replicant', "foreign replicant slot: A's slot carries B's slot name");
$node->safe_psql('old_b', "SELECT replicant.enable_pipeline('shared')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'shared'", 60, 'old_b'),
	"foreign replicant slot: B's pipeline halts instead of decoding A's slot");
like($node->safe_psql('old_b', "SELECT coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'shared'"),
	qr/^replication slot "replicant_shared" is not this pipeline's: it belongs to another database or output plugin/,
	'... saying why');
($ret, $out, $err) = $node->psql('old_b', "SELECT replicant.drop_pipeline('shared')");
is($ret, 0, "foreign replicant slot: B's drop_pipeline succeeds") or diag($err);
like($err, qr/WARNING:  replication slot "replicant_shared" was left in place/, '... with a WARNING');
is(slot_of('replicant_shared'), 'old_a replicant', "foreign_db_slot: A's slot is still there");
$node->safe_psql('old_a', 'INSERT INTO t VALUES (1)');
ok(ReplicantTest::wait_until_synced($node, 'old_a', $sink_old, ['t']), "... and A's pipeline streams on");
unlike(slurp_file($node->logfile), qr/was not created in this database/,
	'... no worker ever tried to decode the other database\'s slot');
$node->safe_psql('old_a', "SELECT replicant.drop_pipeline('shared')");
$sink_old->stop;
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
	# A restart the launcher would make comes after its backoff (1 s at
	# first): no worker may show up while the drop is held, for 10 s (of
	# wall time: on a loaded machine a look takes long, and the drop's
	# psql has a timeout of its own).
	my $restarted = 0;
	my $until = Time::HiRes::time() + 10;
	while (Time::HiRes::time() < $until)
	{
		$restarted = $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'replicant pipeline q_race'")
		  || (slurp_file($node->logfile, $from) =~ /replicant pipeline "q_race" streaming from/);
		last if $restarted;
		usleep(50_000);
	}
	ok(!$restarted, 'drop race: no worker of the pipeline being dropped was started again');
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
		"SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name ~ '^replicant[0-9]*_q_ext\$'"),
	'... and its slot goes');

# DROP EXTENSION committing while the worker waits for a lock on one of its
# tables: the worker's next catalog access fails, and it must exit as for a
# stop it was asked for, not halt into a table that is gone and exit with
# code 1 (as it did on a loaded CI machine).
$node->safe_psql('second', q{
	CREATE EXTENSION replicant;
	SELECT replicant.create_pipeline('q_lock', 'items_pub', '} . $sink2->{url} . q{');
});
ok(state_is('second', 'q_lock', 'streaming'), 'drop while locked: a streaming pipeline');
my $lock_worker = $node->safe_psql('second',
	"SELECT worker_pid FROM replicant.status WHERE pipeline = 'q_lock'");
my $drop_session = ReplicantTest::Session->new($node, 'second');
is($drop_session->query('BEGIN; DROP EXTENSION replicant; SELECT 1', 60), '1',
	'drop while locked: DROP EXTENSION, not committed');
$node->safe_psql('second', "INSERT INTO items VALUES (300, 'locked')");
ok(ReplicantTest::poll($node,
		"SELECT count(*) > 0 FROM pg_locks WHERE pid = $lock_worker AND NOT granted"),
	'... the worker waits for a lock the drop holds');
is($drop_session->query('COMMIT; SELECT 2', 60), '2', '... the drop commits');
undef $drop_session;
ok(no_worker('q_lock'), '... the worker exits');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name ~ '^replicant[0-9]*_q_lock\$'"),
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
