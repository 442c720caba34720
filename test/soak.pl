# soak.pl -- randomized crash trials on one cluster; run it through soak.sh.
#
# One node, one pipeline, the reference sink.  Each trial starts a write
# workload (pgbench: two clients updating shared rows, every transaction
# also inserting its xid into the published table txn), waits a random
# moment, injects one random crash, waits until a new worker streams,
# lets the workload finish (restarting it for a second if the crash ended
# its connections), waits until the sink acknowledged everything, and
# checks the transactions committed since the previous trial:
#
#   loss        source xids (table txn) the sink never applied
#   effect_dup  commit_lsns the sink applied more than once
#   raw re-deliveries: accepted requests whose first transaction the sink
#               had already applied (skipped by its watermark); at most one
#               per crash, as README "Delivery guarantee" says
#
# Crashes: the fault points decode, after_send, after_ack, after_checkpoint
# (the worker exits there), kill -9 of the worker (the postmaster restarts
# every process), pg_ctl stop -m immediate + start.
#
# Housekeeping: the launcher backs off a worker that ran less than 10 s
# before exiting (1 s, 2 s, 4 s, ... up to 60 s), which back-to-back trials
# would escalate; after a fault-point trial the pipeline is disabled and
# enabled once it is idle and checked, which starts the next trial from no
# failures.  A server crash restarts the launcher and its counts anyway.
#
# Environment: SOAK_TRIALS (20), SOAK_SEED (random), SOAK_FAULTS (a comma
# list, default all six), SOAK_SUMMARY (a file the summary line is written to),
# SOAK_CHECKPOINT_INTERVAL (replicant.checkpoint_interval in ms, default 0:
# a checkpoint after every request, so at most one batch per crash is
# asserted; with more, a crash re-delivers the interval's requests, and only
# no loss and no effect duplicate are asserted).  The summary is also the
# last "# soak:" note of the TAP output.
use strict;
use warnings;
use List::Util qw(max min sum);
use Time::HiRes qw(time usleep);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin";
use ReplicantTest;

my $TRIALS = $ENV{SOAK_TRIALS} || 20;
my $SEED = length($ENV{SOAK_SEED} // '') ? $ENV{SOAK_SEED} : int(rand(2**31));
srand($SEED);
my @FAULTS = qw(decode after_send after_ack after_checkpoint kill9 immediate);
if ($ENV{SOAK_FAULTS})    # a subset, to soak one kind of crash
{
	my %known = map { $_ => 1 } @FAULTS;
	@FAULTS = split /,/, $ENV{SOAK_FAULTS};
	die "unknown fault in SOAK_FAULTS: $ENV{SOAK_FAULTS}" if grep { !$known{$_} } @FAULTS;
}
my $LOAD_S = 4;    # seconds of workload per trial; the crash comes 0.3 .. 2.3 s in
my $INTERVAL = $ENV{SOAK_CHECKPOINT_INTERVAL} // 0;
die "SOAK_CHECKPOINT_INTERVAL must be milliseconds" unless $INTERVAL =~ /^[0-9]+$/;
my $BATCH_BOUND = $INTERVAL == 0;    # at most one batch per crash

my $started = time();
my $node = ReplicantTest::new_node('soak',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = $INTERVAL");
my $sink = ReplicantTest::start_sink();

my $start_load = ReplicantTest::crash_workload($node, $sink, 'soak');

sub poll { return ReplicantTest::poll($node, @_); }

sub worker_pid
{
	my ($ret, $out) = $node->psql('postgres',
		"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'soak'");
	return $ret == 0 && $out ne '' ? $out : 0;
}

my $STREAMING = "SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status"
  . " WHERE pipeline = 'soak'";

# ---- the sink's new rows, read incrementally from its SQLite database --------
my $SINK_QUERY = <<'PY';
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
for r in db.execute("SELECT seq, commit_lsn, xid FROM txlog WHERE seq > ? ORDER BY seq",
                    (int(sys.argv[2]),)):
    print("t\t%d\t%d\t%d" % r)
for r in db.execute("SELECT seq, kind, coalesce(transactions, 0), coalesce(first_lsn, -1),"
                    " coalesce(last_lsn, -1) FROM accepted WHERE seq > ? ORDER BY seq",
                    (int(sys.argv[3]),)):
    print("a\t%d\t%s\t%d\t%d\t%d" % r)
PY

my ($txlog_seq, $accepted_seq, $source_id) = (0, 0, 0);
my (%sink_lsns, %sink_xids);    # everything the sink applied so far
my $watermark = -1;             # highest commit_lsn of an accepted request

# Reads what the sink applied and accepted since the last call; returns the
# number of requests that re-delivered an applied transaction, and adds
# effect duplicates to $$dups.
sub read_sink
{
	my ($dups) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ReplicantTest::PYTHON, '-c', $SINK_QUERY, $sink->{db}, $txlog_seq, $accepted_seq ],
		'>', \$out, '2>', \$err)
	  or die "reading the sink database failed: $err";
	my $redelivered = 0;
	foreach my $line (split /\n/, $out)
	{
		my @f = split /\t/, $line;
		if ($f[0] eq 't')
		{
			$txlog_seq = $f[1];
			$$dups++ if $sink_lsns{ $f[2] }++;
			$sink_xids{ $f[3] } = 1;
		}
		else
		{
			$accepted_seq = $f[1];
			next unless $f[2] eq 'changes' && $f[3] > 0;
			$redelivered++ if $f[4] <= $watermark;
			$watermark = max($watermark, $f[5]);
		}
	}
	return $redelivered;
}

# ---- crashes ------------------------------------------------------------------
sub inject
{
	my ($fault, $pid) = @_;
	return 0 unless $pid > 0;    # kill(0) would signal our own process group
	if ($fault eq 'kill9')
	{
		return kill('KILL', $pid) == 1;
	}
	if ($fault eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
		return 1;
	}
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET replicant.fault_point = '$fault';\nSELECT pg_reload_conf();");
	my $died = poll("SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status"
		  . " WHERE pipeline = 'soak'", 20);
	# Before the launcher restarts it (>= 1 s later): the next worker runs clean.
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET replicant.fault_point;\nSELECT pg_reload_conf();");
	return $died;
}

# Crashes the server log shows since $offset.
sub crashes_logged
{
	my ($offset) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
	my $n = () = $log =~ /replicant: fault point "[a-z_]+" reached|was terminated by signal 9|received immediate shutdown request/g;
	return $n;
}

# ---- trials -------------------------------------------------------------------
my ($loss, $effect_dup, $redelivered_total, $max_per_crash, $failed) = (0, 0, 0, 0, 0);
my (%by_fault, %redelivered_by_fault);

ok(poll($STREAMING, 60), 'the pipeline streams');
for my $trial (1 .. $TRIALS)
{
	my $fault = $FAULTS[ int(rand(@FAULTS)) ];
	my $label = "trial $trial ($fault)";
	$by_fault{$fault}++;
	my $offset = -s $node->logfile;

	if (!poll($STREAMING, 90))
	{
		fail("$label: the pipeline streams before the crash");
		$failed++;
		next;
	}
	my $pid = worker_pid();
	my $load = $start_load->($LOAD_S);
	usleep(int((0.3 + rand(2.0)) * 1_000_000));
	my $injected = inject($fault, $pid);
	my $recovered = $injected
	  && poll("SELECT state = 'streaming' AND coalesce(worker_pid, 0) NOT IN (0, $pid)"
		  . " FROM replicant.status WHERE pipeline = 'soak'", 120);
	# A server crash ends the workload's connections: write on after it.
	if (!$load->pumpable)
	{
		$load->finish;
		$load = $start_load->(1);
	}
	$load->finish;

	# Everything committed is acknowledged by the sink before we look.
	my $lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	my $delivered = $node->safe_psql('postgres',
		"SELECT replicant.await_delivered('soak', '$lsn', 60000)") eq 't';

	# Transactions committed since the last trial, and what the sink applied.
	my @new = split /\n/, $node->safe_psql('postgres',
		"SELECT id || ' ' || xid FROM txn WHERE id > $source_id ORDER BY id");
	my @xids;
	foreach (@new)
	{
		my ($id, $xid) = split / /;
		$source_id = $id;
		push @xids, $xid;
	}
	my $dups = 0;
	my $redelivered = read_sink(\$dups);
	my @missing = grep { !$sink_xids{$_} } @xids;
	my $deadline = time() + 30;
	while (@missing && time() < $deadline)    # not expected after await_delivered
	{
		usleep(200_000);
		$redelivered += read_sink(\$dups);
		@missing = grep { !$sink_xids{$_} } @xids;
	}
	my $crashes = crashes_logged($offset);

	$loss += @missing;
	$effect_dup += $dups;
	$redelivered_total += $redelivered;
	$redelivered_by_fault{$fault} += $redelivered;
	my $per_crash = $crashes ? $redelivered / $crashes : $redelivered;
	$max_per_crash = max($max_per_crash, $per_crash);

	my $ok = $injected && $recovered && $delivered && $crashes >= 1;
	$ok &&= ok(!@missing && !$dups && (!$BATCH_BOUND || $per_crash <= 1),
		sprintf('%s: %d transactions, %d missing, %d applied twice, %d re-delivered, %d crash(es)',
			$label, scalar(@xids), scalar(@missing), $dups, $redelivered, $crashes));
	if (!$ok)
	{
		$failed++;
		fail("$label: injected $injected, recovered $recovered, delivered $delivered, crashes $crashes")
		  unless $injected && $recovered && $delivered && $crashes >= 1;
		diag("$label: missing xids @missing[0 .. min(9, $#missing)]") if @missing;
	}

	# Start the next trial from no restart failures (see the header).
	if ($fault !~ /^(kill9|immediate)$/)
	{
		$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('soak')");
		poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'soak'", 30);
		$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('soak')");
	}
}

# The rows themselves converged too, not just the transaction log.
ok(poll($STREAMING, 90), 'the pipeline streams at the end');
my $converged = ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'kv', 'txn' ], 120);
ok($converged, 'the sink equals the source at the end');
my $all_source = $node->safe_psql('postgres', 'SELECT count(*) FROM txn');
is(scalar(keys %sink_lsns), $all_source, 'the sink applied exactly the committed transactions');

my $faults = join(',', map { "$_:" . ($by_fault{$_} // 0) } @FAULTS);
my $summary = sprintf(
	'soak: trials=%d loss=%d effect_dup=%d raw_redelivered_batches=%d max_per_crash=%g'
	  . ' failed_trials=%d converged=%d transactions=%d faults=%s seed=%d checkpoint_interval=%dms wall=%.0fs',
	$TRIALS, $loss, $effect_dup, $redelivered_total, $max_per_crash, $failed,
	$converged ? 1 : 0, $all_source, $faults, $SEED, $INTERVAL, time() - $started);
note(sprintf('re-delivered batches by fault: %s',
		join(', ', map { "$_ " . ($redelivered_by_fault{$_} // 0) } @FAULTS)));
note($summary);
ok($loss == 0 && $effect_dup == 0 && (!$BATCH_BOUND || $max_per_crash <= 1) && $failed == 0,
	$BATCH_BOUND
	? 'no loss, no effect duplicate, at most one re-delivered batch per crash'
	: 'no loss, no effect duplicate');
if ($ENV{SOAK_SUMMARY})
{
	open(my $fh, '>', $ENV{SOAK_SUMMARY}) or die "cannot write $ENV{SOAK_SUMMARY}: $!";
	print $fh "$summary\n";
	close $fh;
}
done_testing();
