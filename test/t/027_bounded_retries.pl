# No crash loop by construction: a worker retries an error only while it is
# known to be transient, and at most 10 times in a row without progress;
# every other error, and the 11th transient one, halts the pipeline with a
# value-free reason naming the phase, the error class and the table.
#
# For each phase (decode, encode, deliver, checkpoint, snapshot read,
# backfill read, sync) the fault point <phase>:error=<SQLSTATE> raises an
# error there: a transient class halts after exactly 11 failed runs (10
# restarts), a class that is not transient halts at once, and after the halt
# nothing is started again.  Then the fault is gone, resume_pipeline, and
# everything arrives.
#
# Without a fault point: a ClickHouse-format update that changes the key
# and leaves a TOASTed column unchanged cannot be rendered (its old row has
# the key only): it halts at once, saying why, instead of restarting
# forever.
#
# What others do to a worker is no failure of the pipeline's: a role that
# may only signal the owner's processes (pg_signal_backend) terminates or
# cancels its worker 12 times, and the pipeline is not halted: it is
# restarted with backoff.  A start that cannot connect is no loop to restart
# without bound, though: when the owner lost CONNECT on the database, the
# sync worker halts the pipeline saying why, after at most 11 refused
# starts; when the database refuses every connection (ALLOW_CONNECTIONS
# false; the sync worker is refused too), the launcher halts it after the
# bound, and the sync worker records the halt once it may connect again.
#
# A worker that dies by a signal (SIGSEGV here, the OOM killer's SIGKILL)
# makes the postmaster restart the server, which wipes the launcher's
# count: the runs are also counted in the catalog, and after 11 such
# crashes without progress the pipeline halts, while a healthy pipeline of
# the same server, idle through all of it, does not.
#
# replicant.max_restart_delay, set in postgresql.conf, holds from the start,
# not only after a reload.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $HALT_S = 180;

# Restarts 100 ms apart: eleven runs take seconds, not the default minutes.
my $node = ReplicantTest::new_node('bounded',
	conf => "replicant.max_restart_delay = 100ms\nrestart_after_crash = on");
my $sink = ReplicantTest::start_sink();
$node->safe_psql('postgres', q{CREATE EXTENSION replicant;});

# Defined before the prefix "replicant" is reserved: not dropped at start.
is($node->safe_psql('postgres', 'SHOW replicant.max_restart_delay'), '100ms',
	'restart_delay_setting: replicant.max_restart_delay from postgresql.conf holds from the start');
unlike(slurp_file($node->logfile), qr/invalid configuration parameter name "replicant\./,
	'... no replicant setting is dropped at start');

sub poll { return ReplicantTest::poll($node, @_); }

sub log_count
{
	my ($re, $from) = @_;
	my @m = (PostgreSQL::Test::Utils::slurp_file($node->logfile, $from) =~ /$re/g);
	return scalar @m;
}

sub set_fault { return ReplicantTest::set_fault_point($node, $_[0]); }

# A table and publication for a case with $rows rows, and (unless $create
# is false) its pipeline, streaming: then the rows are inserted after it
# started, so that the stream delivers them.
sub new_case
{
	my ($p, %opts) = @_;
	my $db = $opts{db} // 'postgres';
	my $rows = "INSERT INTO $p SELECT g, 'row ' || g FROM generate_series(1, $opts{rows}) g";
	$node->safe_psql($db, "CREATE TABLE $p (id int PRIMARY KEY, v text);"
		  . " CREATE PUBLICATION ${p}_pub FOR TABLE $p;");
	if (!($opts{create} // 1))
	{
		$node->safe_psql($db, $rows);
		return;
	}
	$node->safe_psql($db, "SELECT replicant.create_pipeline('$p', '${p}_pub', '$sink->{url}')");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'", 60, $db),
		"$p: streaming");
	$node->safe_psql($db, $rows);
	return;
}

# Waits for the halt and checks what it says and how often the fault fired:
# $runs failed runs, each logged as an ERROR when it was retried.
sub expect_halt
{
	my ($p, $phase, $class, $transient, $from, %opts) = @_;
	my $db = $opts{db} // 'postgres';
	ok(ReplicantTest::poll($node,
			"SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = '$p'",
			$HALT_S, $db),
		"$p: halted");
	my $error = $node->safe_psql($db, "SELECT last_error FROM replicant.status WHERE pipeline = '$p'");
	my $table = $opts{table} ? qq{ on table "$opts{table}"} : '';
	my $re = qr/^phase "\Q$phase\E" failed\Q$table\E with error class \Q$class\E/;
	like($error, $re, "$p: the reason names the phase, the table and the class");
	if ($transient)
	{
		like($error, qr/, 11 times in a row( without progress)?$/, "$p: after the 11th failure");
	}
	else
	{
		unlike($error, qr/times in a row/, "$p: at the first failure");
	}
	# The halt is one event line (README, "State changes in the log"): its
	# reason, quoted and escaped (it has quotes), unquoted is last_error.
	my $reason;
	my $deadline = time() + $HALT_S;
	while (!defined $reason && time() < $deadline)
	{
		my @lines = PostgreSQL::Test::Utils::slurp_file($node->logfile, $from) =~
		  /LOG:  replicant: event=halted pipeline=\Q$p\E reason=("(?:[^"\\]|\\.)*")$/mg;
		$reason = $lines[-1];
		usleep(100_000) unless defined $reason;
	}
	ok(defined $reason, "$p: the halt is one event line");
	$reason //= '';
	$reason =~ s/^"(.*)"$/$1/s;
	$reason =~ s/\\(.)/$1/g;
	is($reason, $error, "$p: the event's reason, unquoted, is last_error");
	my $retried = log_count(qr/ERROR:  fault point "[a-z_]+" raised an error of class \Q$class\E/, $from);
	is($retried, $opts{retried} // ($transient ? 11 : 0),
		"$p: failed runs retried ($retried), each logged");
	return;
}

# Nothing is started again: another pipeline's whole start and first
# delivery, longer than any restart delay, adds no failure.
sub no_restart
{
	my ($p, $from, %opts) = @_;
	my $db = $opts{db} // 'postgres';
	my $before = log_count(qr/fault point "[a-z_]+" raised an error/, $from);
	my $probe = "probe_$p";
	new_case($probe, rows => 1, db => $db);
	$node->safe_psql($db, "INSERT INTO $probe VALUES (1000, 'x')");
	ok(ReplicantTest::wait_until_synced($node, $db, $sink, [$probe]), "$p: a probe pipeline delivers meanwhile");
	is(log_count(qr/fault point "[a-z_]+" raised an error/, $from), $before,
		"$p: not started again after the halt");
	is($node->safe_psql($db, "SELECT state FROM replicant.status WHERE pipeline = '$p'"),
		'halted', "$p: still halted");
	$node->safe_psql($db, "SELECT replicant.drop_pipeline('$probe')");
	return;
}

# Resumed without the fault, the pipeline delivers everything.
sub resume_delivers
{
	my ($p, %opts) = @_;
	my $db = $opts{db} // 'postgres';
	$node->safe_psql($db, "SELECT replicant.resume_pipeline('$p')");
	$node->safe_psql($db, "INSERT INTO $p VALUES (2000, 'after resume')");
	ok(ReplicantTest::wait_until_synced($node, $db, $sink, [$p]), "$p: resumed, every row arrives");
	$node->safe_psql($db, "SELECT replicant.drop_pipeline('$p')");
	return;
}

# One phase, one class: the fault, what sets it off, the halt.
sub phase_case
{
	my ($point, $phase, $class, $transient, %opts) = @_;
	my $p = "${point}_" . lc($class);
	my $from = -s $node->logfile;
	my $trigger = $opts{trigger} // sub { $node->safe_psql('postgres', "INSERT INTO $p VALUES (1001, 'x')") };

	new_case($p, rows => $opts{rows} // 3, create => !$opts{create});
	set_fault("$point:error=$class");
	$opts{create}->($p) if $opts{create};
	$trigger->($p);
	expect_halt($p, $phase, $class, $transient, $from, %opts);
	set_fault(undef);
	no_restart($p, $from);
	resume_delivers($p);
	return;
}

foreach my $case (
	[ 'decode', 'decode', '40001', 1 ],
	[ 'decode', 'decode', '54000', 0 ],
	[ 'encode', 'encode', '53200', 1, table => 1 ],
	[ 'encode', 'encode', '54000', 0, table => 1 ],
	[ 'deliver', 'deliver', '08006', 1 ],
	[ 'deliver', 'deliver', '42501', 0 ],
	[ 'checkpoint', 'checkpoint', '55P03', 1 ],
	[ 'checkpoint', 'checkpoint', 'XX000', 0 ],
  )
{
	my ($point, $phase, $class, $transient, %opts) = @$case;
	my $p = "${point}_" . lc($class);
	phase_case($point, $phase, $class, $transient, %opts, table => $opts{table} ? $p : undef);
}

# An initial snapshot, read by one shard worker: the shard worker's error
# ends the pipeline worker's run too, which counts it.
foreach my $case ([ '40P01', 1 ], [ '22P02', 0 ])
{
	my ($class, $transient) = @$case;
	my $p = 'snapshot_read_' . lc($class);
	phase_case('snapshot_read', 'snapshot read', $class, $transient,
		rows => 1000, table => $p,
		create => sub {
			$node->safe_psql('postgres',
				"SELECT replicant.create_pipeline('$_[0]', '$_[0]_pub', '$sink->{url}',"
				  . " snapshot => 'initial', snapshot_workers => 1)");
		},
		trigger => sub { });
}

# A shard worker that cannot import the exported snapshot (as when its
# pipeline worker is gone) exits without a halt, whatever the error's
# class: the pipeline worker restarts the snapshot, a bounded number of
# times, and only then halts.
{
	my $p = 'snapshot_import';
	my $from = -s $node->logfile;
	new_case($p, rows => 100, create => 0);
	set_fault("snapshot_import:error=22023");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$p', '${p}_pub', '$sink->{url}', snapshot => 'initial', snapshot_workers => 1)");
	ok(poll("SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = '$p'", $HALT_S),
		"$p: halted");
	is($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = '$p'"),
		'a snapshot worker exited abnormally, 11 times in a row without progress',
		"$p: by the pipeline worker, after the 11th failed run");
	is(log_count(qr/snapshot worker of pipeline "$p" exits: it could not import the exported snapshot/, $from), 11,
		"$p: each time the snapshot worker exited without a halt of its own");
	set_fault(undef);
	resume_delivers($p);
}

# A backfill of a streaming pipeline.
foreach my $case ([ '57014', 1 ], [ '0A000', 0 ])
{
	my ($class, $transient) = @$case;
	my $p = 'backfill_read_' . lc($class);
	phase_case('backfill_read', 'backfill read', $class, $transient,
		rows => 1000, table => $p,
		trigger => sub { $node->safe_psql('postgres', "SELECT replicant.backfill('$_[0]', '$_[0]')") });
}

# The sync worker, which reads a database's pipelines for the launcher:
# each case in a database of its own, since a failed sync halts every
# pipeline of its database.  The pipeline is created while the fault is
# set, so it never ran: it halts in the catalog, with the reason.
foreach my $case ([ '55006', 1 ], [ '42P01', 0 ])
{
	my ($class, $transient) = @$case;
	my $db = 'sync_' . lc($class);
	my $p = "p_$db";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION replicant');
	new_case($p, rows => 0, db => $db, create => 0);
	my $from = -s $node->logfile;
	set_fault("sync:error=$class");
	$node->safe_psql($db, "SELECT replicant.create_pipeline('$p', '${p}_pub', '$sink->{url}')");
	# The 11th failed sync is the one that halts: it is not thrown again.
	expect_halt($p, 'sync', $class, $transient, $from, db => $db, retried => $transient ? 10 : 0);
	set_fault(undef);
	no_restart($p, $from, db => $db);
	resume_delivers($p, db => $db);
}

# ---- a ClickHouse-format key change that leaves TOAST unchanged -------------
{
	my $from = -s $node->logfile;
	$node->safe_psql('postgres', q{
CREATE TABLE ch_t (id int PRIMARY KEY, big text);
ALTER TABLE ch_t ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE PUBLICATION ch_pub FOR TABLE ch_t;
INSERT INTO ch_t VALUES (1, repeat('x', 10000));
});
	# The format renders before anything is sent: the sink is never asked.
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('ch', 'ch_pub', '$sink->{url}', format => 'clickhouse')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ch'"), 'clickhouse: streaming');
	$node->safe_psql('postgres', 'UPDATE ch_t SET id = 2');
	ok(poll("SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = 'ch'"),
		'clickhouse: halted');
	like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'ch'"),
		qr/^update of table "ch_t" left TOASTed columns unchanged, and the table's replica identity does not log them/,
		'clickhouse: the reason says why, before the format is asked to render it');
	is(log_count(qr/replicant pipeline "ch" streaming from/, $from), 1,
		'clickhouse: the worker was not started again');
}

# ---- what others do to a worker is no failure of the pipeline's ------------
{
	$node->safe_psql('postgres', q{
CREATE ROLE alice LOGIN;
GRANT USAGE ON SCHEMA replicant TO alice;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO alice;
CREATE ROLE ops LOGIN;
GRANT pg_signal_backend TO ops;
CREATE TABLE others (id int PRIMARY KEY, v text);
GRANT SELECT ON others TO alice;
CREATE PUBLICATION others_pub FOR TABLE others;
});
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('others', 'others_pub', '$sink->{url}')",
		extra_params => [ '-U', 'alice' ]);
	my $status = "SELECT state || ' ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'others'";
	my %seen;
	my $new_worker = sub {
		my $pid;
		ReplicantTest::poll($node,
			"SELECT worker_pid IS NOT NULL AND worker_pid NOT IN (" . join(',', 0, keys %seen)
			  . ") AND state = 'streaming' OR state = 'halted' FROM replicant.status WHERE pipeline = 'others'",
			$HALT_S);
		$pid = $node->safe_psql('postgres',
			"SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'others' AND state = 'streaming'");
		return undef if $pid eq '' || $pid == 0 || $seen{$pid};
		$seen{$pid} = 1;
		return $pid;
	};
	foreach my $how ('terminate', 'cancel')
	{
		my $rounds = 0;
		%seen = ();
		foreach my $i (1 .. 12)
		{
			my $pid = $new_worker->() // last;
			$node->safe_psql('postgres', "SELECT pg_${how}_backend($pid)", extra_params => [ '-U', 'ops' ]);
			$rounds++;
		}
		is($rounds, 12, "others: ops could ${how} alice's worker 12 times in a row");
		ok(defined $new_worker->(), "others: after 12 ${how}s it is started again");
		like($node->safe_psql('postgres', $status), qr/^streaming/,
			"signal_halt: ${how}s by a role with no right over the pipeline do not halt it");
	}
	$node->safe_psql('postgres', "INSERT INTO others VALUES (1, 'x')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['others']), 'others: and it delivers');

	# A start that cannot connect is no loop to restart without bound: its
	# owner lost CONNECT on the database (the sync worker halts it with the
	# reason), or the database refuses every connection (the sync worker
	# cannot connect either: the launcher halts it after the bound).
	my $from = -s $node->logfile;
	$node->safe_psql('postgres', 'REVOKE CONNECT ON DATABASE postgres FROM PUBLIC; GRANT CONNECT ON DATABASE postgres TO ops');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('others')");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('others')");
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'others'"),
		'connect_revoked: the pipeline halts');
	is($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'others'"),
		'pipeline owner alice has no CONNECT privilege on database postgres',
		'connect_revoked: ... saying why');
	cmp_ok(log_count(qr/FATAL:  permission denied for database "postgres"/, $from), '<=', 11,
		'connect_revoked: at most REPLICANT_MAX_RETRIES + 1 (11) refused starts');
	$node->safe_psql('postgres', 'GRANT CONNECT ON DATABASE postgres TO PUBLIC');
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('others')");
	$node->safe_psql('postgres', "INSERT INTO others VALUES (2, 'y')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['others']),
		'connect_revoked: with CONNECT again and resumed, it delivers');

	$node->safe_psql('postgres', 'CREATE DATABASE closing');
	$node->safe_psql('closing', q{
CREATE EXTENSION replicant;
CREATE TABLE c (id int PRIMARY KEY);
CREATE PUBLICATION c_pub FOR TABLE c;
});
	$node->safe_psql('closing', "SELECT replicant.create_pipeline('closing', 'c_pub', '$sink->{url}')");
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'closing'",
			$HALT_S, 'closing'),
		'allow_connections: streaming');
	$from = -s $node->logfile;
	$node->safe_psql('postgres', 'ALTER DATABASE closing ALLOW_CONNECTIONS false');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
		  . " WHERE datname = 'closing' AND backend_type = 'replicant pipeline'");
	# Its sync worker is refused too: whichever bound is reached first (the
	# launcher's count of refused starts, or of failed syncs) halts it.
	my $halted = qr/replicant pipeline "closing" halts|could not read the pipelines of database \d+ 11 times in a row: halting them/;
	foreach (1 .. 10 * $HALT_S)
	{
		last if log_count($halted, $from);
		usleep(100_000);
	}
	cmp_ok(log_count($halted, $from), '>=', 1, 'allow_connections: the launcher halts the pipeline');
	cmp_ok(log_count(qr/background worker "replicant pipeline" \(PID \d+\) exited with exit code 1/, $from),
		'<=', 12, 'allow_connections: after at most REPLICANT_MAX_RETRIES + 1 refused starts (and the terminated run)');
	# Connections allowed again: a halt the launcher decided (its own count)
	# is recorded and waits for a resume; one it made because the database's
	# pipelines could not even be read is no decision of the pipeline's and
	# ends with the next sync that reads them.  Either way it streams again.
	$node->safe_psql('postgres', 'ALTER DATABASE closing ALLOW_CONNECTIONS true');
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' OR (state = 'halted' AND last_error IS NOT NULL)"
			  . " FROM replicant.status WHERE pipeline = 'closing'",
			$HALT_S, 'closing'),
		'allow_connections: once it may, the sync worker reads its state');
	$node->safe_psql('closing', "SELECT replicant.resume_pipeline('closing')")
	  if $node->safe_psql('closing', "SELECT state FROM replicant.status WHERE pipeline = 'closing'") eq 'halted';
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'closing'",
			$HALT_S, 'closing'),
		'allow_connections: connections allowed again (and resumed if halted), it streams');
	$node->safe_psql('closing', "SELECT replicant.drop_pipeline('closing')");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('others')");
}

# ---- a worker killed by a signal, again and again ---------------------------
{
	my $down = ReplicantTest::start_sink(name => 'down');
	my $quiet = ReplicantTest::start_sink(name => 'quiet');
	$node->safe_psql('postgres', q{
CREATE TABLE crashy (id int PRIMARY KEY, v text);
CREATE PUBLICATION crashy_pub FOR TABLE crashy;
CREATE TABLE idle (id int PRIMARY KEY, v text);
CREATE PUBLICATION idle_pub FOR TABLE idle;
});
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('crashy', 'crashy_pub', '$down->{url}')");
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('idle', 'idle_pub', '$quiet->{url}')");
	ok(poll("SELECT count(*) = 2 AND bool_and(state = 'streaming') FROM replicant.status"
			  . " WHERE pipeline IN ('crashy', 'idle')"),
		'crash: two pipelines stream');
	# The sink refuses every batch: the same batch each run, no progress.
	$down->control({ fail_status => 503 });
	$node->safe_psql('postgres', "INSERT INTO crashy VALUES (1, 'x')");
	my $from = -s $node->logfile;
	my %seen;
	my $kills = 0;
	foreach my $i (1 .. 14)
	{
		ReplicantTest::poll($node,
			"SELECT state = 'halted' OR (state = 'retrying' AND worker_pid NOT IN ("
			  . join(',', 0, keys %seen) . ")) FROM replicant.status WHERE pipeline = 'crashy'", $HALT_S);
		my ($ret, $pid) = $node->psql('postgres',
			"SELECT worker_pid FROM replicant.status WHERE pipeline = 'crashy' AND state = 'retrying'");
		last unless $ret == 0 && $pid =~ /^\d+$/ && !$seen{$pid};
		$seen{$pid} = 1;
		kill 'SEGV', $pid;
		$kills++;
	}
	note("crash: workers killed by SIGSEGV: $kills");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = 'crashy'",
			$HALT_S),
		'crash_signal: a worker that crashes again and again without progress halts the pipeline');
	is($kills, 11, 'crash: after 11 crashes in a row, not 12');
	like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'crashy'"),
		qr/^the pipeline worker ended 11 times in a row without progress, the last time without an error it could report/,
		'crash: the reason says so, value-free');
	is(log_count(qr/background worker "replicant pipeline" \(PID \d+\) was terminated by signal 11/, $from), 11,
		'crash: 11 crash restarts of the server');
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'idle'"),
		'crash: the idle pipeline of the same server is not halted');
	$node->safe_psql('postgres', "INSERT INTO idle VALUES (1, 'y')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $quiet, ['idle']), 'crash: and it delivers');
	$down->control({ clear => 1 });
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('crashy')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $down, ['crashy']), 'crash: resumed, the row arrives');
}

$node->stop;
done_testing();
