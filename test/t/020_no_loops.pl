# Errors that retrying cannot fix halt with a clear reason instead of
# looping, and prerequisites are checked where they can still be refused:
#
#   Retry-After: 0 or a date in the past still backs off
#   the owner's role settings (default_transaction_read_only, timeouts,
#     isolation) do not change what the worker does
#   create_pipeline refuses when no replication slot or worker slot is free
#   a worker that cannot create its slot for an initial snapshot halts
#   a worker whose owner lost LOGIN halts, saying so
#   two sessions creating the same pipeline: the loser hears "already exists"
#   a replicant_-named slot that replicant did not create is never dropped
#   DROP EXTENSION stops the workers and drops the slots at once
#   DROP DATABASE takes its pipelines along: their workers stop (also while
#     they stream, with or without FORCE, with another session connected),
#     their slots go, and their places in replicant.max_pipelines are free;
#     a DROP DATABASE refused for a reason known before it stops anything
#     (another session, the caller's own database, a caller who may not
#     terminate the workers: a database owner who is neither a superuser nor
#     the pipelines' owner) leaves the same worker streaming; one that fails
#     after the stop (a prepared transaction) has the workers commit what the
#     sink acknowledged first: nothing is delivered twice
#
# versions: all (slot handling: slots refused, not created, never dropped)
use strict;
use warnings;
use Time::HiRes qw(time usleep);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $HALT_S = 30;

my $node = ReplicantTest::new_node('noloops',
	conf => "max_prepared_transactions = 5\nlog_statement = none");
my $sink = ReplicantTest::start_sink();
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub FOR TABLE t;
});

sub poll { return ReplicantTest::poll($node, @_); }

sub state_of
{
	my ($p, $db) = @_;
	return $node->safe_psql($db // 'postgres',
		"SELECT state || ' ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$p'");
}

sub log_matches_in
{
	my ($n, $re, $from) = @_;
	my @m = (substr(slurp_file($n->logfile), $from) =~ /$re/g);
	return scalar @m;
}

sub log_matches
{
	my ($re, $from) = @_;
	my $log = slurp_file($node->logfile);
	$log = substr($log, $from);
	my @m = ($log =~ /$re/g);
	return scalar @m;
}

# ---- Retry-After: 0 and a past date still back off ----------------------------
foreach my $case ([ 'zero', '0' ], [ 'past', 'Wed, 21 Oct 2015 07:28:00 GMT' ])
{
	my ($label, $value) = @$case;
	my $s = ReplicantTest::start_sink(name => "ra_$label", fail_first => 4,
		retry_after => $value);
	$node->safe_psql('postgres', "CREATE TABLE ra_$label (id int PRIMARY KEY)");
	$node->safe_psql('postgres', "CREATE PUBLICATION ra_${label}_pub FOR TABLE ra_$label");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('ra_$label', 'ra_${label}_pub', '$s->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ra_$label'"),
		"Retry-After $label: streaming");
	my $t0 = time();
	$node->safe_psql('postgres', "INSERT INTO ra_$label VALUES (1)");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $s, ["ra_$label"]),
		"Retry-After $label: delivered after four refusals");
	my $elapsed = time() - $t0;
	# Four backoffs of at least 100, 200, 400 and 800 ms.
	cmp_ok($elapsed, '>=', 1.4, "Retry-After $label: the retries backed off (${elapsed}s)");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ra_$label')");
	$s->stop;
}

# ---- role settings do not break the worker -----------------------------------
{
	$node->safe_psql('postgres', q{
CREATE ROLE carol LOGIN;
GRANT USAGE ON SCHEMA replicant TO carol;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO carol;
GRANT SELECT ON replicant.status TO carol;
CREATE TABLE rs (id int PRIMARY KEY, v text);
GRANT SELECT ON rs TO carol;
CREATE PUBLICATION rs_pub FOR TABLE rs;
ALTER ROLE carol SET default_transaction_read_only = on;
ALTER ROLE carol SET default_transaction_isolation = 'serializable';
ALTER ROLE carol SET lock_timeout = '1ms';
ALTER ROLE carol SET idle_in_transaction_session_timeout = '1ms';
ALTER ROLE carol SET search_path = public;
});
	my $s = ReplicantTest::start_sink(name => 'sink_roleset');
	# create_pipeline itself runs in the session, which read-only would refuse.
	$node->safe_psql('postgres', "SET ROLE carol; SET default_transaction_read_only = off;"
		  . " SELECT replicant.create_pipeline('roleset', 'rs_pub', '$s->{url}', snapshot => 'initial')");
	$node->safe_psql('postgres', "INSERT INTO rs VALUES (1, 'a')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'roleset'", $HALT_S),
		'role settings: pipeline streaming');
	$node->safe_psql('postgres', "INSERT INTO rs VALUES ($_, 'b')") foreach 2 .. 6;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $s, ['rs']), 'role settings: delivered');
	ok(poll("SELECT checkpoint_lsn IS NOT NULL AND lag_bytes < 100000 FROM replicant.status"
			  . " WHERE pipeline = 'roleset'"),
		'role settings: the checkpoint moves');
	is($s->stats->{duplicate_transactions}, 0, 'role settings: nothing delivered twice');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('roleset')");
	$s->stop;
}

# ---- two sessions create the same pipeline -----------------------------------
{
	# A prepared transaction with an XID makes slot creation wait.
	$node->safe_psql('postgres',
		"BEGIN; INSERT INTO t VALUES (1000, 'x'); PREPARE TRANSACTION 'hold'");
	my @sessions;
	foreach my $n (1, 2)
	{
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start(
			[
				'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-h', $node->host,
				'-p', $node->port, '-d', 'postgres', '-c',
				"SELECT replicant.create_pipeline('dup', 'pub', '$sink->{url}')"
			],
			'>', \$out, '2>', \$err);
		push @sessions, { h => $h, out => \$out, err => \$err };
		# The first one is waiting inside slot creation before the second starts.
		my $slot = ReplicantTest::slot_name($node, 'postgres', 'dup');
		ok(poll("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')"),
			'same name: the first create holds the slot')
		  if $n == 1;
	}
	# Let the second get as far as it will, then let both finish.
	poll("SELECT count(*) >= 1 FROM pg_stat_activity WHERE query LIKE '%create_pipeline(''dup''%'"
		  . " AND wait_event_type = 'Lock'", 10) or note('second create is not waiting on a lock');
	$node->safe_psql('postgres', "COMMIT PREPARED 'hold'");
	$_->{h}->finish foreach @sessions;
	my @errors = grep { $_ ne '' } map { ${ $_->{err} } } @sessions;
	is(scalar(@errors), 1, 'same name: exactly one create failed');
	like($errors[0] // '', qr/pipeline "dup" already exists/, 'same name: the loser hears the pipeline exists');
	unlike($errors[0] // '', qr/replication slot/, 'same name: not a slot error');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('dup')");
}

# ---- a slot named replicant_* that replicant did not create ---------------------
{
	$node->safe_psql('postgres',
		"SELECT pg_create_logical_replication_slot('replicant_foreign', 'test_decoding')");
	$node->restart;    # the launcher re-reads every database
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('other', 'pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'other'"),
		'foreign slot: another pipeline streams (syncs ran)');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'replicant_foreign'"),
		'1', 'foreign slot: not dropped');
	$node->psql('postgres', "SELECT pg_drop_replication_slot('replicant_foreign')");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('other')");
}

# ---- an initial snapshot whose slot cannot be created halts --------------------
{
	my $used = $node->safe_psql('postgres', 'SELECT count(*) FROM pg_replication_slots');
	my $s = ReplicantTest::start_sink(name => 'sink_noslot');
	$s->stop;    # refused: the worker waits in its first snapshot batch
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('noslot', 'pub', '$s->{url}', snapshot => 'initial')");
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'noslot'", $HALT_S),
		'no free slot: the worker waits for the sink before creating its slot');
	my $free = $node->safe_psql('postgres',
		"SELECT current_setting('max_replication_slots')::int - count(*) FROM pg_replication_slots");
	$node->safe_psql('postgres', "SELECT pg_create_physical_replication_slot('fill_$_')")
	  foreach 1 .. $free;
	my $from = -s $node->logfile;
	$s->restart;
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'noslot'", $HALT_S),
		'no free slot: halted');
	like(state_of('noslot'), qr/replication slot/, 'no free slot: last_error says why');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'replicant pipeline noslot'"),
		'0', 'no free slot: no worker left running');
	# (the machine-readable event line of the one halt repeats its reason)
	cmp_ok(log_matches(qr/^(?!.*replicant: event=).*all replication slots are in use/m, $from), '<=', 1,
		'no free slot: the error was met once, not in a loop');

	# create_pipeline refuses up front while no slot is free.
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT replicant.create_pipeline('noslot2', 'pub', '$s->{url}', snapshot => 'initial')");
	isnt($ret, 0, 'no free slot: create_pipeline refuses');
	like($err, qr/replication slot/, 'no free slot: and says why');
	like($err, qr/max_replication_slots/, 'no free slot: with a hint');
	$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('fill_$_')") foreach 1 .. $free;
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('noslot')");
	$s->stop;
}

# ---- an owner that lost LOGIN ----------------------------------------------------
{
	$node->safe_psql('postgres', q{
CREATE ROLE dave LOGIN;
GRANT USAGE ON SCHEMA replicant TO dave;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO dave;
GRANT SELECT ON t TO dave;
});
	$node->safe_psql('postgres',
		"SET ROLE dave; SELECT replicant.create_pipeline('nologin', 'pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'nologin'"),
		'lost LOGIN: streaming before');
	my $from = -s $node->logfile;
	$node->safe_psql('postgres', 'ALTER ROLE dave NOLOGIN');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('nologin')");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('nologin')");
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'nologin'", $HALT_S),
		'lost LOGIN: halted, not starting');
	like(state_of('nologin'), qr/log in/, 'lost LOGIN: last_error says why');
	my $fatals = log_matches(qr/FATAL:  role "dave" is not permitted to log in/, $from);
	cmp_ok($fatals, '<=', 1, 'lost LOGIN: at most one failed start before the halt');
	# Another pipeline's whole start and first delivery: longer than any restart delay.
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('probe', 'pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'probe'"),
		'lost LOGIN: another pipeline starts meanwhile');
	is(log_matches(qr/FATAL:  role "dave" is not permitted to log in/, $from), $fatals,
		'lost LOGIN: the worker is not restarted in a loop');
	$node->safe_psql('postgres', 'ALTER ROLE dave LOGIN');
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('nologin')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'nologin'", $HALT_S),
		'lost LOGIN: resumed once LOGIN is back');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('nologin')");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('probe')");
}

# ---- no free worker slot ---------------------------------------------------------
{
	my $small = ReplicantTest::new_node('fewworkers',
		conf => "max_worker_processes = 6\nmax_logical_replication_workers = 0");
	$small->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE w (id int PRIMARY KEY);
CREATE PUBLICATION wpub FOR TABLE w;
});
	my (@created, $refusal);
	foreach my $n (1 .. 8)
	{
		my ($ret, $out, $err) = $small->psql('postgres',
			"SELECT replicant.create_pipeline('w$n', 'wpub', '$sink->{url}')");
		if ($ret == 0) { push @created, "w$n"; next; }
		$refusal = $err;
		last;
	}
	ok(defined $refusal, 'worker slots: create_pipeline refuses at some point');
	like($refusal // '', qr/max_worker_processes/, 'worker slots: the refusal names max_worker_processes');
	ok(ReplicantTest::poll($small,
			"SELECT bool_and(state = 'streaming') AND count(*) = " . scalar(@created)
			  . " FROM replicant.status", $HALT_S),
		'worker slots: every pipeline that was created streams');
	$small->stop;
}

# ---- DROP EXTENSION stops workers and drops slots ---------------------------------
{
	$node->safe_psql('postgres', 'CREATE DATABASE gone');
	$node->safe_psql('gone', q{
CREATE EXTENSION replicant;
CREATE TABLE g (id int PRIMARY KEY);
CREATE PUBLICATION gpub FOR TABLE g;
});
	$node->safe_psql('gone', "SELECT replicant.create_pipeline('gone', 'gpub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'gone'", 30, 'gone'),
		'drop extension: streaming before');
	my $slot = ReplicantTest::slot_name($node, 'gone', 'gone');
	$node->safe_psql('gone', 'DROP EXTENSION replicant CASCADE');
	ok(poll("SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'replicant pipeline gone')"),
		'drop extension: the worker stopped');
	ok(poll("SELECT NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')"),
		'drop extension: the slot was dropped');
}

# ---- DROP DATABASE ------------------------------------------------------------------
{
	# Two pipeline places: a dropped database's pipelines must give theirs up.
	# Checkpoints only at stops: what the sink acknowledged stays pending.
	my $dn = ReplicantTest::new_node('dropdb',
		conf => "replicant.max_pipelines = 2\nreplicant.checkpoint_interval = '1h'\nmax_prepared_transactions = 5");
	my $dsink = ReplicantTest::start_sink(name => 'sink_dropdb');
	my $dpoll = sub { my ($sql, $db) = @_; return ReplicantTest::poll($dn, $sql, $HALT_S, $db); };
	my $make_db = sub {
		my ($db, @pipelines) = @_;
		$dn->safe_psql('postgres', "CREATE DATABASE $db");
		$dn->safe_psql($db, q{
CREATE EXTENSION replicant;
CREATE TABLE d (id int PRIMARY KEY);
CREATE PUBLICATION dpub FOR TABLE d;
});
		$dn->safe_psql($db, "SELECT replicant.create_pipeline('$_', 'dpub', '$dsink->{url}')")
		  foreach @pipelines;
		return;
	};
	my $fatal_re = qr/FATAL:  database \d+ does not exist/;

	# Two disabled pipelines: the database drops as any would.
	$make_db->('doomed_off', 'off1', 'off2');
	$dn->safe_psql('doomed_off', "SELECT replicant.disable_pipeline('off1'), replicant.disable_pipeline('off2')");
	ok($dpoll->("SELECT bool_and(state = 'disabled') FROM replicant.status", 'doomed_off'),
		'drop database: two disabled pipelines');
	$dn->safe_psql('postgres', 'DROP DATABASE doomed_off');
	is($dn->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name ~ '^replicant[0-9]*_off[12]\$'"),
		'0', 'drop database: their slots went with it');

	# A pipeline of another database gets a place.
	$make_db->('doomed_on', 'on1');
	ok($dpoll->("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'on1'", 'doomed_on'),
		'drop database: the places of the dropped pipelines are free');

	my $on1_pid = sub {
		return $dn->safe_psql('doomed_on', "SELECT coalesce(worker_pid, 0) FROM replicant.status WHERE pipeline = 'on1'");
	};
	my $pid = $on1_pid->();

	# A DROP DATABASE that fails (another session is connected) leaves it streaming.
	my ($out, $err) = ('', '');
	my $session = IPC::Run::start(
		[ 'psql', '-X', '-h', $dn->host, '-p', $dn->port, '-d', 'doomed_on', '-c', 'SELECT pg_sleep(600)' ],
		'>', \$out, '2>', \$err);
	ok($dpoll->("SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'doomed_on' AND query LIKE '%pg_sleep%'"),
		'drop database: another session is connected');
	my ($ret, $stdout, $stderr) = $dn->psql('postgres', 'DROP DATABASE doomed_on');
	like($stderr, qr/is being accessed by other users|is used by an active logical replication slot/,
		'drop database: refused while another session is connected');
	is($on1_pid->(), $pid, 'drop database: the refusal left the same worker streaming');
	$dn->safe_psql('doomed_on', 'INSERT INTO d VALUES (1)');
	ok(ReplicantTest::wait_until_synced($dn, 'doomed_on', $dsink, ['d']), 'drop database: and delivers');

	# The database's owner, neither a superuser nor the pipeline's owner, may
	# not terminate the (superuser's) worker; nor may its DROP DATABASE, in
	# the database itself or from another, with FORCE or not.
	$dn->safe_psql('postgres', 'CREATE ROLE dbo LOGIN CREATEDB; ALTER DATABASE doomed_on OWNER TO dbo');
	($ret, $stdout, $stderr) = $dn->psql('doomed_on', "SELECT pg_terminate_backend($pid)",
		extra_params => [ '-U', 'dbo' ]);
	like($stderr, qr/permission denied to terminate process|must be a superuser to terminate superuser process/,
		'drop database: the database owner may not terminate the worker');
	foreach my $case ([ 'doomed_on', 'DROP DATABASE doomed_on' ], [ 'postgres', 'DROP DATABASE doomed_on' ],
		[ 'postgres', 'DROP DATABASE doomed_on WITH (FORCE)' ])
	{
		my ($db, $sql) = @$case;
		($ret, $stdout, $stderr) = $dn->psql($db, $sql, extra_params => [ '-U', 'dbo' ]);
		isnt($ret, 0, "drop database: the owner's $sql from $db is refused");
		is($on1_pid->(), $pid, "dropdb_owner: ... and leaves the superuser's worker alone");
	}

	$session->kill_kill;
	$dn->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
		  . " WHERE datname = 'doomed_on' AND backend_type = 'client backend'");
	ok($dpoll->("SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = 'doomed_on' AND backend_type = 'client backend'"),
		'drop database: the other session is gone');

	# A DROP DATABASE that fails only after the stop (a prepared transaction
	# in the database): the worker committed what the sink acknowledged.
	my $dups = $dsink->stats->{duplicate_transactions};
	$dn->safe_psql('doomed_on', 'INSERT INTO d VALUES (2)');
	$dn->safe_psql('doomed_on', 'INSERT INTO d VALUES (3)');
	ok(ReplicantTest::wait_until_synced($dn, 'doomed_on', $dsink, ['d']),
		'drop database: two more transactions acknowledged, their checkpoint pending');
	$dn->safe_psql('doomed_on', "BEGIN; INSERT INTO d VALUES (4); PREPARE TRANSACTION 'in_doomed'");
	($ret, $stdout, $stderr) = $dn->psql('postgres', 'DROP DATABASE doomed_on');
	like($stderr, qr/is being accessed by other users/, 'drop database: refused for the prepared transaction');
	$dn->safe_psql('doomed_on', "ROLLBACK PREPARED 'in_doomed'");
	ok($dpoll->("SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'on1'",
			'doomed_on'),
		'drop database: after the refusal the pipeline streams again');
	$dn->safe_psql('doomed_on', 'INSERT INTO d VALUES (5)');
	ok(ReplicantTest::wait_until_synced($dn, 'doomed_on', $dsink, ['d']), 'drop database: and delivers');
	is($dsink->stats->{duplicate_transactions} - $dups, 0,
		'quiet_stop_checkpoint: nothing the sink acknowledged before the stop was delivered again');
	# The next database's table of the same name goes to the same sink.
	$dn->safe_psql('doomed_on', 'DELETE FROM d WHERE id > 1');
	ok(ReplicantTest::wait_until_synced($dn, 'doomed_on', $dsink, ['d']), 'drop database: rows deleted again');
	$session = IPC::Run::start(
		[ 'psql', '-X', '-h', $dn->host, '-p', $dn->port, '-d', 'doomed_on', '-c', 'SELECT pg_sleep(600)' ],
		'>', \$out, '2>', \$err);
	ok($dpoll->("SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'doomed_on' AND query LIKE '%pg_sleep%'"),
		'drop database: another session is connected again');

	# WITH (FORCE) while it streams and the other session is still connected:
	# its worker holds its slot, which PostgreSQL would refuse; replicant
	# stops it first, and PostgreSQL terminates the session.
	my $from = -s $dn->logfile;
	($ret, $stdout, $stderr) = $dn->psql('postgres', 'DROP DATABASE doomed_on WITH (FORCE)');
	is($ret, 0, 'drop database: WITH (FORCE) while a pipeline streams') or diag($stderr);
	$session->kill_kill;
	is($dn->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name ~ '^replicant[0-9]*_on1\$'"),
		'0', 'drop database: its slot went with it');
	ok($dpoll->("SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"),
		'drop database: no worker of it is left');

	# Both places are free again, and nothing tries to start the dropped pipeline.
	$make_db->('after', 'new1', 'new2');
	ok($dpoll->("SELECT count(*) = 2 AND bool_and(state = 'streaming') FROM replicant.status", 'after'),
		'drop database: both places serve new pipelines');
	$dn->safe_psql('after', 'INSERT INTO d VALUES (1)');
	ok(ReplicantTest::wait_until_synced($dn, 'after', $dsink, ['d']), 'drop database: they deliver');
	is(log_matches_in($dn, $fatal_re, $from), 0, 'drop database: no worker tried to connect to it');
	$dn->stop;
}

$node->stop;
done_testing();
