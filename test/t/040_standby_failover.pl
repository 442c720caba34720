# A pipeline on a primary with a physical standby, then the standby promoted.
#
# Every version: on the standby (in recovery) replicant.status is readable
# and every pipeline's state is 'standby'; no pipeline worker runs there.
#
# PostgreSQL 17 and later: the pipeline is created with failover => true,
# the standby synchronizes its slot (sync_replication_slots), the primary
# holds the slot back to what the standby received (synchronized_standby_slots).
# Under a write workload the primary dies and the standby is promoted; the
# same sink is kept and nothing else is touched: the pipeline resumes on the
# new primary from its checkpoint and the sink ends up equal to the source.
#
# PostgreSQL 15 and 16 (no failover slots): failover => true is an error with
# a hint.  The promoted standby has the pipeline's rows but not its slot: the
# pipeline halts with a clear last_error, its worker is not started again,
# nothing more reaches the sink, and recreating it with a snapshot (README)
# brings the sink back to the source.
#
# versions: all (failover slots and standbys differ per version)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $primary = ReplicantTest::new_node('primary', start => 0);
my $failover_slots = $primary->pg_version >= 17;
# The primary's logical slots wait for the standby behind this physical slot.
$primary->append_conf('postgresql.conf', "synchronized_standby_slots = 'standby1'")
  if $failover_slots;
$primary->start;

my $sink = ReplicantTest::start_sink();

$primary->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL);
CREATE TABLE txn (id bigserial PRIMARY KEY, client int);
CREATE PUBLICATION fo_pub FOR TABLE t, txn;
SELECT pg_create_physical_replication_slot('standby1');
});

my $create = "SELECT replicant.create_pipeline('fo', 'fo_pub', '$sink->{url}'";
my $slot = ReplicantTest::slot_name($primary, 'postgres', 'fo');
if ($failover_slots)
{
	$primary->safe_psql('postgres', "$create, failover => true)");
	is( $primary->safe_psql('postgres',
			"SELECT failover FROM pg_replication_slots WHERE slot_name = '$slot'"),
		't', 'failover => true: the slot is a failover slot');
}
else
{
	my ($ret, $out, $err) = $primary->psql('postgres', "$create, failover => true)");
	isnt($ret, 0, 'failover => true is refused before PostgreSQL 17');
	like($err, qr/ERROR:  failover slots are not supported by this server/,
		'failover => true: the error says why');
	like($err, qr/HINT:  .*recreate it with a snapshot/, 'failover => true: the error has a hint');
	$primary->safe_psql('postgres', "$create)");
}

# ---- the standby ----------------------------------------------------------------
$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
# Slot synchronization needs a database name in primary_conninfo.
my $conninfo = 'host=' . $primary->host . ' port=' . $primary->port . ' dbname=postgres';
$standby->append_conf('postgresql.conf', qq{
primary_conninfo = '$conninfo application_name=standby'
primary_slot_name = 'standby1'
hot_standby_feedback = on
});
# The standby's copy of the primary's synchronized_standby_slots would make
# it, once promoted, wait for a slot it does not have.
$standby->append_conf('postgresql.conf',
	"sync_replication_slots = on\nsynchronized_standby_slots = ''")
  if $failover_slots;
$standby->start;
$primary->wait_for_catchup('standby');

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is($standby->safe_psql('postgres', 'SELECT pipeline, state FROM replicant.status'),
	'fo|standby', 'on the standby replicant.status reads, and the state is standby');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'replicant%'"),
	'0', 'no replicant worker runs on the standby');

# With synchronized_standby_slots the pipeline delivers only once the
# standby has the WAL, so this waits for the standby too.
$primary->safe_psql('postgres', 'INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g');
ok(ReplicantTest::wait_until_synced($primary, 'postgres', $sink, ['public.t']),
	'the sink has the first rows');

# The workload: each transaction bumps two keys and logs itself in txn.
my $script = PostgreSQL::Test::Utils::tempdir() . '/fo.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set a random(1, 100)
BEGIN;
UPDATE t SET v = v + 1 WHERE id = :a;
INSERT INTO t VALUES (1000 + :a * 10 + :client_id, 1) ON CONFLICT (id) DO UPDATE SET v = t.v + 1;
INSERT INTO txn (client) VALUES (:client_id);
COMMIT;
});
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '2', '-T', '300', '-R', '100', '--max-tries=50',
		'-f', $script, '-h', $primary->host, '-p', $primary->port, 'postgres'
	],
	'>', \$pgb_out, '2>', \$pgb_err);

ok(ReplicantTest::poll($primary, 'SELECT count(*) >= 200 FROM txn'), 'the workload runs');

if ($failover_slots)
{
	# The standby has a persistent synchronized copy of the slot, and keeps
	# it up to date while the workload runs.
	ok( ReplicantTest::poll($standby,
			"SELECT synced AND NOT temporary FROM pg_replication_slots"
			  . " WHERE slot_name = '$slot'", 120),
		'the standby synchronized the failover slot');
	my $lsn = $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	ok( ReplicantTest::poll($standby,
			"SELECT confirmed_flush_lsn >= '$lsn' FROM pg_replication_slots"
			  . " WHERE slot_name = '$slot'", 120),
		'the synchronized slot follows the workload');

	# The primary dies under load; the standby takes over.
	$primary->stop('immediate');
	$pgbench->finish;
	$standby->promote;
	is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f', 'the standby was promoted');

	ok( ReplicantTest::poll($standby,
			"SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status"
			  . " WHERE pipeline = 'fo'", 120),
		'the pipeline resumes on the promoted standby');
	$standby->safe_psql('postgres',
		"INSERT INTO t VALUES (-1, 1); INSERT INTO txn (client) VALUES (-1)");
	ok(ReplicantTest::wait_until_synced($standby, 'postgres', $sink, [ 'public.t', 'public.txn' ]),
		'after the failover the sink equals the new primary: nothing lost');
	is($standby->safe_psql('postgres', "SELECT last_error IS NULL FROM replicant.status"),
		't', 'no error after the failover');
}
else
{
	# Without failover slots the promoted standby has no slot.  Let the
	# standby catch up first, so that the sink holds nothing it lacks.
	$pgbench->kill_kill;
	$pgbench->finish;
	$primary->wait_for_catchup('standby');
	ok(ReplicantTest::wait_until_synced($primary, 'postgres', $sink, [ 'public.t', 'public.txn' ]),
		'the sink has everything before the promotion');
	my $before = $sink->stats;
	$primary->stop('immediate');
	$standby->promote;

	ok( ReplicantTest::poll($standby,
			"SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status"
			  . " WHERE pipeline = 'fo'", 120),
		'promoted without its slot, the pipeline halts');
	like(
		$standby->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'fo'"),
		qr/^replication slot "\Q$slot\E" does not exist \(it was dropped, or this server is a promoted standby that had no failover copy of it\): recreate the pipeline with a snapshot$/,
		'last_error says the slot is missing and what to do');

	# A second pipeline (to a sink of its own), created after the halt: once
	# its worker streams, the launcher has made its decisions, and it did not
	# start fo's worker again.
	my $probe_sink = ReplicantTest::start_sink(name => 'probe_sink');
	$standby->safe_psql('postgres', "CREATE PUBLICATION probe_pub FOR TABLE txn");
	$standby->safe_psql('postgres',
		"SELECT replicant.create_pipeline('probe', 'probe_pub', '$probe_sink->{url}')");
	ok( ReplicantTest::poll($standby,
			"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'probe'", 60),
		'another pipeline starts on the promoted server');
	$standby->safe_psql('postgres', "SELECT replicant.drop_pipeline('probe')");
	is($standby->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'fo'"),
		'halted', 'the halted pipeline stays halted');
	my $halts = () = slurp_file($standby->logfile) =~ /replication slot "\Q$slot\E" does not exist/g;
	is($halts, 1, 'its worker ran once: no restart loop');
	my $after = $sink->stats;
	is(scalar @{ $after->{accepted} }, scalar @{ $before->{accepted} },
		'nothing reached the sink after the promotion');
	is($after->{duplicate_transactions}, 0, 'nothing was delivered twice');

	# The recovery README describes: recreate the pipeline with a snapshot.
	$standby->safe_psql('postgres', "SELECT replicant.drop_pipeline('fo')");
	$standby->safe_psql('postgres', "$create, snapshot => 'initial')");
	$standby->safe_psql('postgres',
		"INSERT INTO t VALUES (-1, 1); INSERT INTO txn (client) VALUES (-1)");
	ok(ReplicantTest::wait_until_synced($standby, 'postgres', $sink, [ 'public.t', 'public.txn' ]),
		'recreated with a snapshot, the pipeline brings the sink back to the source');
}

$standby->stop;
done_testing();
