# An idle pipeline drains to the end of WAL and then writes nothing.
#
# After a burst (and after the pipeline is enabled again), the last WAL is
# the worker's own: its worker_runs update and its asynchronous checkpoint
# commit.  With the source idle, the slot's confirmed_flush_lsn must reach
# pg_current_wal_lsn() (bench/run's wait_drained waits for exactly that),
# and confirming it there must not write WAL that calls for confirming
# again: across several wake-ups of the idle worker no transaction writes.
#
# versions: all (slot confirmation, WAL positions)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

# Nothing else writes: no autovacuum, no checkpoint in the middle.
my $node = ReplicantTest::new_node('idle_drain',
	conf => "autovacuum = off\ncheckpoint_timeout = '1h'");
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
	SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}');
});
my $slot = ReplicantTest::slot_name($node, 'postgres', 'p');
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'the pipeline streams');

my $drained = "SELECT confirmed_flush_lsn >= pg_catalog.pg_current_wal_lsn()"
  . " FROM pg_replication_slots WHERE slot_name = '$slot'";

# The next transaction id: it moves only when a transaction writes.
sub next_xid
{
	return $node->safe_psql('postgres',
		'SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())');
}

# The worker's voluntary context switches: an idle worker sleeps once per
# wake-up (WaitLatch), so they count its wake-ups (and any other sleep).
sub switches
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	my ($n) = map { /^voluntary_ctxt_switches:\s+(\d+)/ ? $1 : () } <$fh>;
	close($fh);
	return $n;
}

# Waits until the worker slept $n more times (at least one second apart
# when idle: IDLE_TIMEOUT_MS), or, without /proc, until $n seconds passed.
sub wait_wakeups
{
	my ($n) = @_;
	my $pid = $node->safe_psql('postgres',
		"SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
	my $start = switches($pid);
	my $since = time();
	while (1)
	{
		my $now = switches($pid);
		return 1 if defined $start && defined $now && $now >= $start + $n && time() > $since + 1;
		return 1 if !defined $start && time() >= $since + $n;
		return 0 if time() > $since + 10 * $n + 60;
		select(undef, undef, undef, 0.1);
	}
}

# Each case: a burst, then the source is idle.
sub idle_drains
{
	my ($case) = @_;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t'], 120),
		"$case: the sink has every row");
	ok(ReplicantTest::poll($node, $drained, 120),
		"$case: with the source idle the slot reaches the end of WAL");
	my $xid = next_xid();
	ok(wait_wakeups(5), "$case: the idle worker woke up several times");
	is(next_xid(), $xid, "$case: and wrote nothing meanwhile");
	ok(ReplicantTest::poll($node, $drained, 120), "$case: the slot is still at the end of WAL");
}

# ---- a burst of changes ------------------------------------------------------------
$node->safe_psql('postgres',
	join('', map { "INSERT INTO t (v) VALUES ('burst $_');\n" } 1 .. 200));
idle_drains('burst');

# ---- enabled again after changes made while disabled ----------------------------------
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
ok(ReplicantTest::poll($node,
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline p'"),
	'the worker stopped');
$node->safe_psql('postgres',
	join('', map { "INSERT INTO t (v) VALUES ('disabled $_');\n" } 1 .. 200));
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
ok(ReplicantTest::poll($node,
		"SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status"
		  . " WHERE pipeline = 'p'"),
	'enabled again, it streams');
idle_drains('re-enabled');

# ---- a restart finds its slot where it left it -----------------------------------------
# The worker confirmed past its own last record: neither a new worker nor a
# restart of the server takes that for a slot moved by something else.
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
ok(ReplicantTest::poll($node,
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline p'"),
	'the worker stopped again');
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
ok(ReplicantTest::poll($node, $drained, 120), 'enabled again, the slot reaches the end of WAL');
$node->restart;
$node->safe_psql('postgres', "INSERT INTO t (v) VALUES ('after restart')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t'], 120),
	'after a restart the pipeline delivers');
is($node->safe_psql('postgres',
	"SELECT state || '|' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'p'"),
	'streaming|', 'streaming, no error');

done_testing();
