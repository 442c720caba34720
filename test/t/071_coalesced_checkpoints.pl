# Coalesced checkpoints (replicant.checkpoint_interval): the sink's
# acknowledgements are counted at once, but the checkpoint row is committed
# at most once per interval.  With a long interval:
#
#   - several acknowledged requests leave the checkpoint where it was, and
#     the slot is never confirmed past the checkpoint row;
#   - a worker that dies after an acknowledgement (fault point after_ack)
#     loses nothing: the next one re-delivers exactly the transactions above
#     the committed checkpoint, each once, and the sink skips them;
#   - await_delivered() does not wait for the interval, it has the pending
#     checkpoint committed;
#   - stopping the worker (disable_pipeline) commits the pending checkpoint,
#     so enabling it again re-delivers nothing.
#   - a SIGTERM while a request is in flight commits the pending checkpoint
#     before the worker exits: only the unanswered request is sent again;
#   - drop_pipeline does not wait for a checkpoint its own delete locked.
#
# With a short one, an idle pipeline's checkpoint catches up by itself.
use strict;
use warnings;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('coalesce', conf => "replicant.checkpoint_interval = '1h'");
my $sink = ReplicantTest::start_sink(keep_bodies => 1);

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
my $slot = ReplicantTest::slot_name($node, 'postgres', 'p');
ok(ReplicantTest::poll($node,
	"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'pipeline streams');
is($node->safe_psql('postgres', 'SHOW replicant.checkpoint_interval'), '1h',
	'checkpoint_interval is an hour');

sub poll { return ReplicantTest::poll($node, @_); }

# The committed checkpoint's commit_lsn as a number (the sink's form), or -1.
sub checkpoint { return $node->safe_psql('postgres', checkpoint_sql()); }

sub checkpoint_sql
{
	return q{SELECT coalesce((SELECT (c.commit_lsn OPERATOR(pg_catalog.-) '0/0')::bigint
		  FROM replicant.checkpoints c JOIN replicant.pipelines p ON p.id = c.pipeline_id
		 WHERE p.name = 'p'), -1)};
}

# Whether the slot is confirmed no further than $lsn (the sink's form), the
# commit of the first transaction above the checkpoint.
sub slot_confirmed_before
{
	my ($lsn) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT (confirmed_flush_lsn OPERATOR(pg_catalog.-) '0/0')::bigint <= $lsn
		  FROM pg_replication_slots WHERE slot_name = '$slot'});
}

# Commits one transaction and returns its commit LSN as the sink has it,
# once the sink applied it (without await_delivered, which would commit the
# checkpoint).
sub insert_and_wait
{
	my ($v) = @_;
	my $applied = scalar @{ $sink->txlog };
	my $xid = $node->safe_psql('postgres',
		"INSERT INTO t (v) VALUES ('$v') RETURNING pg_catalog.txid_current()");
	ok(wait_applied($applied + 1), "$v: the sink applied it");
	my ($txn) = grep { $_->{xid} == $xid } @{ $sink->txlog };
	return $txn ? $txn->{commit_lsn} : undef;
}

# Waits until the sink applied $n transactions.
sub wait_applied
{
	my ($n) = @_;
	return wait_for(sub { scalar @{ $sink->txlog } >= $n });
}

# Waits until $check returns true.
sub wait_for
{
	my ($check) = @_;
	foreach (1 .. 1200)
	{
		return 1 if $check->();
		usleep(50_000);
	}
	return 0;
}

# ---- acknowledged requests do not move the checkpoint -----------------------------
# The worker's first acknowledgement is checkpointed at once: none is older.
my $first = insert_and_wait('first');
ok(poll("SELECT (" . checkpoint_sql() . ") = $first"),
	'the first acknowledgement is checkpointed at once');

my @later = map { insert_and_wait("later $_") } 1 .. 5;
my @requests = grep { $_->{kind} eq 'changes' } @{ $sink->stats->{accepted} };
cmp_ok(scalar(@requests), '>=', 6, 'six requests were acknowledged');
is(checkpoint(), $first, 'the checkpoint stayed at the first one (the interval is an hour)');
is($node->safe_psql('postgres',
	"SELECT transactions_delivered FROM replicant.status WHERE pipeline = 'p'"),
	'6', 'status counts every acknowledged transaction at once');
is(slot_confirmed_before($later[0]), 't',
	'the slot is not confirmed past the first transaction above the checkpoint');

# ---- a crash after an acknowledgement re-delivers what is above the checkpoint ----
# The worker holds after the acknowledgement and is terminated there, which
# exits as the fault point's own exit does.  Were the fault point an exit,
# a new worker that started before the reset reached the postmaster (the
# launcher waits a second; a loaded machine can take longer) would exit
# after its re-delivery too; this one holds instead, until the reset.
my $pid = $node->safe_psql('postgres',
	"SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres',
	"ALTER SYSTEM SET replicant.fault_point = 'after_ack:hold';\nSELECT pg_reload_conf();");
my $crashed = insert_and_wait('crashed');
ok(eval { $node->wait_for_log(qr/fault point "after_ack" reached, holding/, $log_offset) },
	'the fault point was reached');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(poll("SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status WHERE pipeline = 'p'"),
	'the worker exited after the acknowledgement');
# Read before the reset: a new worker may have re-delivered already, and it
# holds after that acknowledgement, before it checkpoints it at once.
is(checkpoint(), $first, 'the crash left the checkpoint at the first transaction');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET replicant.fault_point;\nSELECT pg_reload_conf();");
ok(poll("SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status"
	  . " WHERE pipeline = 'p'"), 'a new worker streams');
# Its first acknowledgement (the re-delivery) is checkpointed at once.
ok(poll("SELECT (" . checkpoint_sql() . ") = $crashed"),
	'the new worker checkpointed the re-delivered transactions');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t'], 60), 'sink equals source');

my %sent;
foreach my $body (@{ $sink->bodies })
{
	next unless ($body->{body}{kind} // '') eq 'changes';
	$sent{ $_->{commit_lsn} }++ foreach @{ $body->{body}{transactions} };
}
my @twice = sort { $a <=> $b } grep { $sent{$_} > 1 } keys %sent;
is_deeply(\@twice, [ sort { $a <=> $b } @later, $crashed ],
	'exactly the transactions above the checkpoint were re-delivered');
is(scalar(grep { $_ > 2 } values %sent), 0, 'none more than once');
my %applied;
$applied{ $_->{commit_lsn} }++ foreach @{ $sink->txlog };
is(scalar(grep { $_ > 1 } values %applied), 0, 'the sink applied each transaction once');
is(scalar(keys %applied), 7, 'and all seven');

# ---- await_delivered has the pending checkpoint committed -------------------------
my $pending = insert_and_wait('pending');
is(checkpoint(), $crashed, 'the acknowledgement is pending');
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', timeout_ms => 60000)"),
	't', 'await_delivered returns without waiting for the interval');
is(checkpoint(), $pending, 'and the checkpoint is committed');

# ---- stopping the worker commits the pending checkpoint ---------------------------
my $stopped = insert_and_wait('before stop');
is(checkpoint(), $pending, 'the acknowledgement is pending');
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'p'"),
	'the worker stopped');
is(checkpoint(), $stopped, 'the stop committed the pending checkpoint');
my $duplicates = $sink->stats->{duplicate_transactions};
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
my $after = insert_and_wait('after enable');
ok(defined $after, 'the pipeline delivers again');
is($sink->stats->{duplicate_transactions}, $duplicates, 'nothing was re-delivered');

# ---- a SIGTERM during a request commits the pending checkpoint first -------------
# A shutdown or pg_terminate_backend lands while the worker waits for its
# sink more often than while it is idle.  The request in flight is not
# acknowledged and is re-sent; what the sink acknowledged before it is not.
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', http_timeout_ms => 3600000)");
ok(poll("SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status"
	  . " WHERE pipeline = 'p'"), 'streams with an hour-long request timeout');
insert_and_wait('first of the worker');
my $acked = insert_and_wait('acknowledged');
is(checkpoint() < $acked, 1, 'its acknowledgement is pending');
my $worker = $node->safe_psql('postgres',
	"SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
my $injected = $sink->stats->{faults_injected};
$sink->control({ hang => 1 });
$node->safe_psql('postgres', "INSERT INTO t (v) VALUES ('in flight')");
ok(wait_for(sub { $sink->stats->{faults_injected} > $injected }),
	'the next request is in flight, unanswered');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker)");
ok(poll("SELECT coalesce(worker_pid, 0) <> $worker FROM replicant.status WHERE pipeline = 'p'"),
	'the worker exited');
is(checkpoint(), $acked, 'it committed the pending checkpoint before exiting');
# The next worker (the launcher starts it within a second or so) may have
# re-sent the request into the hang already, to wait there for an hour: once
# the sink answers again, that worker is stopped too, and the one after it
# re-sends.  A worker not attached yet has sent nothing.
$sink->control({ clear => 1 });
my $next = $node->safe_psql('postgres',
	"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'p'");
if ($next)
{
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($next)");
	ok(poll("SELECT coalesce(worker_pid, 0) <> $next FROM replicant.status WHERE pipeline = 'p'"),
		'the next worker, perhaps waiting in the hang, exited');
}
else
{
	pass('no next worker had started');
}
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t'], 60),
	'the request in flight is delivered again');
my $sends = grep { $_ == $acked } map { map { $_->{commit_lsn} } @{ $_->{body}{transactions} } }
  grep { ($_->{body}{kind} // '') eq 'changes' } @{ $sink->bodies };
is($sends, 1, 'the acknowledged transaction was sent once');

# ---- an idle pipeline's checkpoint catches up within the interval -----------------
$node->safe_psql('postgres',
	"ALTER SYSTEM SET replicant.checkpoint_interval = '200ms';\nSELECT pg_reload_conf();");
ok(poll("SELECT setting = '200' FROM pg_settings WHERE name = 'replicant.checkpoint_interval'"),
	'the interval is 200 ms');
my $idle = insert_and_wait('idle 1');
$idle = insert_and_wait('idle 2');
ok(poll("SELECT (" . checkpoint_sql() . ") = $idle"),
	'with no more traffic the checkpoint catches up');
ok(poll("SELECT s.confirmed_flush_lsn >= c.end_lsn FROM pg_replication_slots s,"
	  . " replicant.checkpoints c WHERE s.slot_name = '$slot'"),
	'and the slot follows it');

is($node->safe_psql('postgres',
	"SELECT state || '|' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'p'"),
	'streaming|', 'pipeline still streaming, no error');

# ---- drop_pipeline with a checkpoint pending ---------------------------------------
# The drop deletes the checkpoint row, then stops the worker and waits for its
# slot: the stopping worker must not wait for that row to commit what is pending.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET replicant.checkpoint_interval = '1h';\nSELECT pg_reload_conf();");
ok(poll("SELECT setting = '3600000' FROM pg_settings WHERE name = 'replicant.checkpoint_interval'"),
	'the interval is an hour again');
insert_and_wait('before drop 1');
my $before_drop = insert_and_wait('before drop 2');
is(checkpoint() < $before_drop, 1, 'an acknowledgement is pending');
my $timed_out = 0;
my $dropped = $node->psql('postgres', "SELECT replicant.drop_pipeline('p')",
	timeout => 60, timed_out => \$timed_out);
ok(!$timed_out && $dropped == 0, 'drop_pipeline returns');
ok(poll("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline p'"),
	'the worker is gone');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'"),
	'0', 'and so is the slot');

done_testing();
