# A pipeline's slot and the WAL it costs (slot_health.c): replicant.status
# shows the WAL each slot retains, the server's wal_status and
# safe_wal_size, the budget and a warning; a slot lost for any cause halts
# its pipeline with the cause in last_error; past max_retained_wal the
# worker gives its slot up and halts.
#
#   (a) max_slot_wal_keep_size = 64MB, sink down: the warning (safe_wal_size
#       under 20 %) is shown and logged, then the slot is invalidated and
#       the pipeline halts with the reason
#   (b) two pipelines, one with max_retained_wal => '32MB' whose sink is
#       down, one healthy: the warning at 80 % of the budget, then the slot
#       given up (retained WAL falls: the slot is gone and checkpoints
#       remove its WAL), the halt's reason; the healthy one misses nothing
#   (d) an operator drops a stopped pipeline's slot: halted with the reason
#   (e) 18's idle_replication_slot_timeout invalidates a disabled
#       pipeline's slot: halted with the reason (skipped where the server
#       has no such setting)
#
# WAL is made by switching segments (1 MB each here) and checkpoints, never
# by waiting.  Every row value carries a marker that no last_error or log
# line may show.
#
# versions: all (slot invalidation causes, src/compat.h)
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $MARK = 'ROWVAL-5be0c7';

my $node = ReplicantTest::new_node('slothealth',
	initdb_extra => ['--wal-segsize=1'],
	conf => "log_statement = none\nmax_wal_size = 32MB\nmin_wal_size = 4MB");
my $down = ReplicantTest::start_sink(name => 'down');
my $up = ReplicantTest::start_sink(name => 'up');

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE filler (id serial PRIMARY KEY, v text);
});

sub poll { return ReplicantTest::poll($node, @_); }

sub status
{
	my ($p, $column) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((${column})::text, '<null>') FROM replicant.status WHERE pipeline = '$p'");
}

sub slot_exists
{
	my ($slot) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'");
}

# One more WAL segment (1 MB of LSN), with a row so that the switch is not a no-op.
sub switch_segments
{
	my ($n, $checkpoint) = @_;
	$node->safe_psql('postgres',
		"DO \$\$ BEGIN FOR i IN 1 .. $n LOOP"
		  . " INSERT INTO filler (v) VALUES ('x'); PERFORM pg_switch_wal(); END LOOP; END \$\$;"
		  . ($checkpoint ? ' CHECKPOINT;' : ''));
}

sub create_pipeline
{
	my ($p, $table, $sink, $extra) = @_;
	$node->safe_psql('postgres', qq{
CREATE TABLE $table (id int PRIMARY KEY, v text);
CREATE PUBLICATION ${table}_pub FOR TABLE $table;
SELECT replicant.create_pipeline('$p', '${table}_pub', '$sink->{url}',
    http_timeout_ms => 2000, connect_timeout_ms => 500$extra);
});
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$p: streaming");
}

# A sink that went away: the pipeline retries the batch holding a row of
# $table and keeps its slot where it was.
sub stuck_retrying
{
	my ($p, $table) = @_;
	$node->safe_psql('postgres', "INSERT INTO $table VALUES (1, '$MARK')");
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = '$p'"),
		"$p: retrying while its sink is down");
}

sub expect_halt
{
	my ($label, $p, $re) = @_;
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = '$p'"),
		"$label: halted");
	like(status($p, 'last_error'), $re, "$label: last_error names the cause");
}

# ---- (a) max_slot_wal_keep_size invalidates the slot ------------------------
{
	my $label = '(a) max_slot_wal_keep_size';
	$down->stop;
	create_pipeline('keep', 'keep_t', $down, '');
	my $slot = status('keep', 'slot_name');
	stuck_retrying('keep', 'keep_t');
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'; SELECT pg_reload_conf()");
	ok(poll("SELECT safe_wal_size IS NOT NULL FROM replicant.status WHERE pipeline = 'keep'"),
		"$label: safe_wal_size shown once the limit is set");
	is(status('keep', 'wal_warning'), 'false', "$label: no warning with the slot's WAL far from the limit");

	# Up to the warning: safe_wal_size under 12.8 MB (20 % of 64 MB).
	my $log_offset = -s $node->logfile;
	my $rounds = 0;
	while (status('keep', 'safe_wal_size * 5 < 64 * 1024 * 1024') eq 'false' && $rounds++ < 100)
	{
		switch_segments(2, 0);
	}
	is(status('keep', 'wal_warning'), 'true', "$label: flagged with safe_wal_size under 20 % of the limit");
	is(status('keep', 'state'), 'retrying', "$label: still retrying");
	ok($node->wait_for_log(
			qr/replicant pipeline "keep" retains \d+ bytes of WAL in its replication slot, -?\d+ bytes before max_slot_wal_keep_size invalidates it/,
			$log_offset),
		"$label: and logged");

	# On to the limit: a checkpoint invalidates the slot (terminating the
	# worker holding it); the next worker halts.
	$rounds = 0;
	while (status('keep', 'wal_status') ne 'lost' && $rounds++ < 100)
	{
		switch_segments(2, 1);
	}
	is(status('keep', 'wal_status'), 'lost', "$label: status shows the slot lost");
	expect_halt($label, 'keep',
		qr/^replication slot "\Q$slot\E" was invalidated because the WAL it needed was removed$/);
	is(status('keep', 'retained_wal_bytes'), '<null>', "$label: a lost slot retains nothing");
	$node->safe_psql('postgres',
		'ALTER SYSTEM RESET max_slot_wal_keep_size; SELECT pg_reload_conf()');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('keep')");
}

# ---- (b) max_retained_wal: the budgeted pipeline gives its slot up -----------
{
	my $label = '(b) max_retained_wal';
	my $budget = 32 * 1024 * 1024;
	create_pipeline('budget', 'budget_t', $down, ", max_retained_wal => '32MB'");
	create_pipeline('healthy', 'healthy_t', $up, '');
	my $slot = status('budget', 'slot_name');
	is(status('budget', 'max_retained_wal'), $budget, "$label: status shows the budget");
	is(status('healthy', 'max_retained_wal'), '<null>', "$label: and none for the other");
	stuck_retrying('budget', 'budget_t');
	my $restart_lsn = $node->safe_psql('postgres',
		"SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '$slot'");

	# Up to 80 % of the budget (25.6 MB), a segment at a time, the healthy
	# pipeline's table written all along.
	my $log_offset = -s $node->logfile;
	my $id = 0;
	my $rounds = 0;
	while (status('budget', "retained_wal_bytes * 5 > $budget * 4") eq 'false' && $rounds++ < 100)
	{
		$id++;
		$node->safe_psql('postgres', "INSERT INTO healthy_t VALUES ($id, '$MARK $id')");
		switch_segments(1, 0);
	}
	is(status('budget', 'wal_warning'), 'true', "$label: flagged past 80 % of the budget");
	is(status('healthy', 'wal_warning'), 'false', "$label: the healthy pipeline is not");
	ok($node->wait_for_log(
			qr/replicant pipeline "budget" retains \d+ bytes of WAL in its replication slot, over 80% of its max_retained_wal of $budget/,
			$log_offset),
		"$label: the warning is logged");
	is(status('budget', 'state'), 'retrying', "$label: still retrying below the budget");

	# Past the budget: the worker drops its slot and halts.
	$rounds = 0;
	while (status('budget', 'state') ne 'halted' && $rounds++ < 100)
	{
		$id++;
		$node->safe_psql('postgres', "INSERT INTO healthy_t VALUES ($id, '$MARK $id')");
		switch_segments(1, 0);
		poll("SELECT state = 'halted' OR retained_wal_bytes <= $budget FROM replicant.status WHERE pipeline = 'budget'");
	}
	expect_halt($label, 'budget',
		qr/^replication slot given up: it retained \d+ bytes of WAL, past the pipeline's max_retained_wal of $budget$/);
	is(slot_exists($slot), '0', "$label: the slot is gone");
	is(status('budget', 'retained_wal_bytes'), '<null>', "$label: status shows no WAL retained");

	# The WAL it pinned goes at the next checkpoints, once the healthy
	# pipeline's slot (which may lag on a busy machine) has moved past it too.
	$rounds = 0;
	my $oldest = '';
	my $pinned = $node->safe_psql('postgres', "SELECT pg_walfile_name('$restart_lsn')");
	while ($rounds++ < 50)
	{
		$id++;
		$node->safe_psql('postgres', "INSERT INTO healthy_t VALUES ($id, '$MARK $id')");
		poll("SELECT replicant.await_delivered('healthy', pg_current_wal_lsn(), 60000)");
		switch_segments(1, 1);
		$oldest = $node->safe_psql('postgres',
			"SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}\$'");
		last if $oldest gt $pinned;
	}
	cmp_ok($oldest, 'gt', $pinned, "$label: the segment the slot pinned was removed");

	# The healthy pipeline delivered everything.
	$id++;
	$node->safe_psql('postgres', "INSERT INTO healthy_t VALUES ($id, '$MARK $id')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $up, ['healthy_t']),
		"$label: the healthy pipeline missed nothing ($id rows)");
	is(status('healthy', 'state'), 'streaming', "$label: and streams on");

	# A halt of a slot given up stands across a resume: the slot is gone.
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('budget')");
	expect_halt("$label, resumed", 'budget',
		qr/^replication slot "\Q$slot\E" does not exist \(it was dropped/);
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('budget')");
}

# ---- (d) an operator drops a stopped pipeline's slot --------------------------
{
	my $label = '(d) slot dropped';
	create_pipeline('dropped', 'dropped_t', $up, '');
	my $slot = status('dropped', 'slot_name');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('dropped')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'dropped'"),
		"$label: the worker is gone");
	$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$slot')");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('dropped')");
	expect_halt($label, 'dropped',
		qr/^replication slot "\Q$slot\E" does not exist \(it was dropped, or this server is a promoted standby that had no failover copy of it\): recreate the pipeline with a snapshot$/);
	is(status('dropped', 'wal_status'), '<null>', "$label: status shows no slot");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('dropped')");
}

# ---- (e) idle_replication_slot_timeout (18) -----------------------------------
SKIP:
{
	skip 'idle_replication_slot_timeout is new in PostgreSQL 18', 5
	  unless ReplicantTest::server_has_setting($node, 'idle_replication_slot_timeout');
	my $label = '(e) idle_replication_slot_timeout';
	create_pipeline('idle', 'idle_t', $up, '');
	my $slot = status('idle', 'slot_name');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('idle')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'idle'"),
		"$label: the worker is gone");
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET idle_replication_slot_timeout = '1s'; SELECT pg_reload_conf()");
	ok(poll("CHECKPOINT; SELECT invalidation_reason = 'idle_timeout' FROM pg_replication_slots WHERE slot_name = '$slot'"),
		"$label: a checkpoint invalidated the idle slot");
	$node->safe_psql('postgres',
		'ALTER SYSTEM RESET idle_replication_slot_timeout; SELECT pg_reload_conf()');
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('idle')");
	expect_halt($label, 'idle',
		qr/^replication slot "\Q$slot\E" was invalidated because it was inactive for longer than idle_replication_slot_timeout$/);
}

# ---- (f) a caught-up pipeline keeps its slot -----------------------------------
# restart_lsn lags a caught-up pipeline's confirmed position by what was
# written since the last running-transactions record the decoder saw, and
# cannot pass the oldest transaction in progress that wrote WAL, in any
# database: a role with no right over the pipeline can hold one open.
# Neither is the sink's doing: only a sink that far behind gives the slot up.
{
	my $label = '(f) caught up';
	create_pipeline('caught', 'caught_t', $up, ", max_retained_wal => '8MB'");
	$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN; CREATE DATABASE elsewhere');
	my ($in, $out, $err) = ("BEGIN; CREATE TEMP TABLE m (i int); SELECT 'ready';\n", '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-h', $node->host, '-p', $node->port, '-U', 'mallory', '-d', 'elsewhere' ],
		'<', \$in, '>', \$out, '2>', \$err);
	$h->pump until $out =~ /ready/ || !$h->pumpable;
	like($out, qr/ready/, "$label: mallory holds a transaction open in another database");
	my $retained = 0;
	foreach my $round (1 .. 40)
	{
		$node->safe_psql('postgres',
			"INSERT INTO filler (v) SELECT repeat('x', 200) FROM generate_series(1, 5000);"
			  . " INSERT INTO caught_t VALUES ($round, '$MARK $round');");
		poll("SELECT replicant.await_delivered('caught', pg_current_wal_lsn(), 60000)");
		$retained = status('caught', 'retained_wal_bytes');
		last if $retained eq '<null>' || $retained > 2 * 8 * 1024 * 1024;
	}
	cmp_ok($retained, '>', 8 * 1024 * 1024, "$label: its slot retains more WAL than its budget");
	is(status('caught', 'state'), 'streaming', "$label: the pipeline did not give its slot up");
	is(status('caught', 'wal_warning'), 'true', "$label: but status warns");
	$in .= "COMMIT;\n\\q\n";
	$h->finish;
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('caught')");
}

# ---- no row value anywhere ---------------------------------------------------
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/\Q$MARK\E/,
	'no row value in the server log');

done_testing();
