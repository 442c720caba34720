# Crash injection at every step of the delivery cycle (docs/internals.md §1),
# each under a concurrent write workload: the fault points 'decode',
# 'after_send', 'after_ack', 'after_checkpoint' (the worker exits and the
# launcher restarts it), 'after_ack:abort' (the whole server restarts),
# kill -9 of the worker and an immediate stop of the server at a random
# moment.  After each crash the reference sink must equal the source (no
# loss), hold every committed transaction exactly once (no effect-duplicate)
# and have been sent at most one batch it had already applied (raw
# re-delivery <= 1 batch per crash).
#
# Every transaction of the test inserts one row into txn, with its xid, so
# the set of committed transactions is known exactly on the source.
use strict;
use warnings;
use List::Util qw(max min);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $LOAD_S = 8;    # seconds of workload per scenario

my $started = time();
# At most one batch per crash needs a checkpoint after every request.
my $node = ReplicantTest::new_node('crash',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0");
my $sink = ReplicantTest::start_sink();

my $start_load = ReplicantTest::crash_workload($node, $sink, 'crash');

sub poll { return ReplicantTest::poll($node, @_); }

sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'crash'");
}

# Accepted requests that held a transaction the sink had already applied,
# from index $from of the accepted list on.
sub redeliveries
{
	my ($accepted, $from) = @_;
	my ($watermark, $count) = (-1, 0);
	for my $i (0 .. $#$accepted)
	{
		my $r = $accepted->[$i];
		next unless $r->{kind} eq 'changes' && $r->{transactions};
		$count++ if $i >= $from && $r->{first_lsn} <= $watermark;
		$watermark = max($watermark, $r->{last_lsn});
	}
	return $count;
}

# No loss and no effect-duplicate so far.
sub check_sink
{
	my ($label) = @_;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'kv', 'txn' ], 120),
		"$label: sink equals source");
	my %source = map { $_ => 1 } split /\n/,
	  $node->safe_psql('postgres', 'SELECT xid FROM txn');
	my @log = @{ $sink->txlog };
	my (%lsns, %xids);
	$lsns{ $_->{commit_lsn} }++ for @log;
	$xids{ $_->{xid} }++ for @log;
	my @missing = grep { !$xids{$_} } keys %source;
	is(scalar(@missing), 0,
		"$label: every committed transaction (" . scalar(keys %source) . ') is in the sink txlog')
	  or diag('missing xids: ' . join(' ', (sort { $a <=> $b } @missing)[ 0 .. min(9, $#missing) ]));
	is(scalar(@log), scalar(keys %source), "$label: and nothing else");
	is(scalar(grep { $_ > 1 } values %lsns), 0, "$label: no commit_lsn applied twice");
}

my ($crashes, $total_redeliveries) = (0, 0);

# Runs one crash scenario: $inject->($pid) crashes the worker while the
# workload runs and returns true once it is gone; the server log must then
# match $crash_re.  $expected, when defined, is the exact number of
# re-delivered batches.
sub scenario
{
	my ($label, $expected, $crash_re, $inject) = @_;
	my $from = scalar @{ $sink->stats->{accepted} };
	my $log_offset = -s $node->logfile;
	my $load = $start_load->($LOAD_S);
	ok(poll("SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'crash'", 30),
		"$label: worker running");
	sleep 1 + rand(2);
	my $pid = worker_pid();
	if ($inject->($pid))
	{
		$crashes++;
		ok(poll("SELECT coalesce(worker_pid, 0) NOT IN (0, $pid) FROM replicant.status"
				  . " WHERE pipeline = 'crash'", 60),
			"$label: a new worker runs");
	}
	else
	{
		fail("$label: a new worker runs (the crash never happened)");
	}
	# A server crash ends the workload's connections: write on after it.
	if (!$load->pumpable)
	{
		$load->finish;
		$load = $start_load->(3);
	}
	$load->finish;
	check_sink($label);
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset);
	like($log, $crash_re, "$label: the server log shows the crash");

	my $count = redeliveries($sink->stats->{accepted}, $from);
	$total_redeliveries += $count;
	cmp_ok($count, '<=', 1, "$label: at most one batch re-delivered ($count)");
	is($count, $expected, "$label: $expected re-delivered, as docs/internals.md §1 says") if defined $expected;
	ok(poll("SELECT state = 'streaming' AND last_error IS NULL FROM replicant.status"
			  . " WHERE pipeline = 'crash'", 30),
		"$label: streaming again");
}

# A fault point set through the configuration: the worker holds there and
# is terminated, which exits as the fault point's own exit does.  A new
# worker that the launcher starts (a second or more later) before the reset
# has reached the postmaster, as on a loaded machine, holds at the point too
# instead of crashing again, until the reset releases it.
sub fault_point
{
	my ($point, $expected) = @_;
	scenario(
		"fault point $point", $expected,
		qr/replicant: fault point "\Q$point\E" reached, holding/,
		sub {
			my ($pid) = @_;
			my $offset = -s $node->logfile;
			$node->safe_psql('postgres',
				"ALTER SYSTEM SET replicant.fault_point = '$point:hold';\nSELECT pg_reload_conf();");
			my $held = eval {
				$node->wait_for_log(qr/fault point "\Q$point\E" reached, holding/, $offset);
			};
			$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)") if $held;
			my $died = $held
			  && poll("SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status"
				  . " WHERE pipeline = 'crash'", 20);
			$node->safe_psql('postgres',
				"ALTER SYSTEM RESET replicant.fault_point;\nSELECT pg_reload_conf();");
			# A worker forked before that reload reached the postmaster
			# may have missed it (a background worker ignores SIGHUP until
			# its handler is set) and hold for good: reload until every
			# worker that held, but the terminated one, was released.
			my ($holds, $released) = (0, 0);
			my $until = time() + 60;
			while (time() < $until)
			{
				my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
				$holds = () = $log =~ /fault point "\Q$point\E" reached, holding/g;
				$released = () = $log =~ /fault point "\Q$point\E" released/g;
				last if $holds - $released <= ($held ? 1 : 0);
				$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
				usleep(200_000);
			}
			ok($holds - $released <= ($held ? 1 : 0),
				"fault point $point: no worker holds after the reset ($holds held, $released released)");
			ok($died, "fault point $point: the worker exited there");
			return $died;
		});
	return;
}

# The batch being decoded was not sent; the one before may be out, its
# answer not read (decoding goes on meanwhile): at most it comes again.
fault_point('decode', undef);
# The sink may have applied the request; at most it comes again.
fault_point('after_send', undef);
# Acknowledged but not checkpointed: exactly that batch comes again.
fault_point('after_ack', 1);
# Checkpointed, slot not confirmed: the checkpoint row says skip it.
fault_point('after_checkpoint', 0);

# 'after_ack:abort' restarts the whole server.  Through pg_reload_conf the
# postmaster would keep the fault across its crash restart and the first new
# worker would abort again, a crash loop the test could only break by
# winning a race: so the setting is written with ALTER SYSTEM and only the
# worker is told to reload it (SIGHUP), and it is removed from the file
# before anything reloads the configuration again.
scenario(
	'after_ack:abort', 1,
	qr/fault point "after_ack" reached, aborting.*terminated by signal 6.*all server processes terminated; reinitializing/s,
	sub {
		my ($pid) = @_;
		$node->safe_psql('postgres',
			"ALTER SYSTEM SET replicant.fault_point = 'after_ack:abort'");
		kill 'HUP', $pid;
		my $died = poll("SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status"
			  . " WHERE pipeline = 'crash'", 30);
		ok($died, 'after_ack:abort: the worker aborted');
		ok(poll('SELECT true', 60), 'after_ack:abort: the server is back');
		$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point');
		return $died;
	});

scenario(
	'kill -9 of the worker', undef,
	qr/\(PID \d+\) was terminated by signal 9.*all server processes terminated; reinitializing/s,
	sub { return kill 'KILL', $_[0]; });

scenario(
	'immediate stop of the server', undef,
	qr/received immediate shutdown request.*database system is ready to accept connections/s,
	sub {
		$node->stop('immediate');
		$node->start;
		return 1;
	});

my $stats = $sink->stats;
cmp_ok($total_redeliveries, '<=', $crashes,
	"at most one re-delivered batch per crash ($total_redeliveries for $crashes crashes)");
note(sprintf('%d crashes; %d transactions applied once each in %d requests; '
		  . '%d requests re-delivered %d already applied transactions; %.0f s',
		$crashes, $stats->{transactions_applied}, scalar(@{ $stats->{accepted} }),
		$total_redeliveries, $stats->{duplicate_transactions}, time() - $started));

done_testing();
