# The resync after a slot loss (resync.c): with on_slot_loss => 'resync' a
# lost slot makes the pipeline 'resync_pending' (the reason in last_error)
# instead of halting; once its sink answers, the old slot goes, a new one is
# made, every published table is read again under its snapshot, and the
# reference sink sweeps, at each table's resync "last", the rows not sent
# since its "first": the sink ends equal to the source, deletes made while
# the slot was lost included.  The source keeps writing throughout
# (inserts, updates and deletes, some of them during the gap).
#
#   (a) max_slot_wal_keep_size = 64MB, sink down: WAL made (1 MB segments,
#       switched and checkpointed; about 70 MB) until the slot is
#       invalidated; sink back: resynced, equal, the gap's deletes swept
#   (b) two pipelines, one with max_retained_wal => '32MB' whose sink is
#       down, one healthy: the healthy one misses nothing, the other
#       resyncs when its sink returns
#   (d) an operator's pg_drop_replication_slot (the pipeline disabled, then
#       enabled)
#   (e) 18's idle_replication_slot_timeout (skipped before 18)
#   (r) resync_pipeline() under load; a halted pipeline is resynced too
#   (k) the worker killed (kill -9: the server restarts) in the middle of
#       a resync's reads: the resync resumes and ends equal
#   (h) the worker killed just before, and just after, the old slot's drop
#       (fault points slot_drop and resync_slot_dropped): the resync goes on
#   plus: the markers say "resync" (reason, lost_from, lost_to), a "last"
#   sent again sweeps nothing, and on_slot_loss shows in
#   pipeline_definitions and is checked.
#   (c), a promoted standby, is 047_promotion_resync.pl.
#
# Every row value carries a marker that no last_error or log line may show.
#
# versions: all (slot invalidation causes, src/compat.h)
use strict;
use warnings;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $MARK = 'ROWVAL-9c21ad';

my $node = ReplicantTest::new_node('resync',
	initdb_extra => ['--wal-segsize=1'],
	conf => "log_statement = none\nmax_wal_size = 32MB\nmin_wal_size = 4MB\n"
	  . "replicant.max_restart_delay = 2000\nrestart_after_crash = on");

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

# More WAL segments (1 MB of LSN each), with a row so that a switch is not a no-op.
sub switch_segments
{
	my ($n, $checkpoint) = @_;
	$node->safe_psql('postgres',
		"DO \$\$ BEGIN FOR i IN 1 .. $n LOOP"
		  . " INSERT INTO filler (v) VALUES ('x'); PERFORM pg_switch_wal(); END LOOP; END \$\$;"
		  . ($checkpoint ? ' CHECKPOINT;' : ''));
}

# Round $r of the workload on $table (ids 1..): inserts ten rows, updates
# and deletes some of the earlier ones.
sub workload
{
	my ($table, $r) = @_;
	my ($lo, $hi) = ($r * 10 + 1, $r * 10 + 10);
	$node->safe_psql('postgres', qq{
INSERT INTO $table SELECT g, '$MARK ' || g FROM generate_series($lo, $hi) g;
UPDATE $table SET v = v || ' u$r' WHERE id % 7 = $r % 7;
DELETE FROM $table WHERE id % 5 = $r % 5 AND id < $lo;
});
}

sub create_pipeline
{
	my ($p, $table, $sink, $extra) = @_;
	$node->safe_psql('postgres', qq{
CREATE TABLE $table (id int PRIMARY KEY, v text);
CREATE PUBLICATION ${table}_pub FOR TABLE $table;
SELECT replicant.create_pipeline('$p', '${table}_pub', '$sink->{url}',
    http_timeout_ms => 2000, connect_timeout_ms => 500, on_slot_loss => 'resync'$extra);
});
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$p: streaming");
}

# The pipeline waits for its sink with the resync recorded.
sub expect_resync_pending
{
	my ($label, $p, $re) = @_;
	ok(poll("SELECT state = 'resync_pending' FROM replicant.status WHERE pipeline = '$p'"),
		"$label: resync_pending");
	like(status($p, 'last_error'), $re, "$label: last_error names the cause");
}

# The sink answers again: the pipeline resyncs, streams, and (the source
# written on meanwhile) ends equal to it, the rows deleted in the gap swept.
sub expect_resynced
{
	my ($label, $p, $table, $sink, $round, $gap_deleted) = @_;
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'", 180),
		"$label: resynced, streaming again");
	workload($table, $$round++) for 1 .. 3;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ["public.$table"]),
		"$label: the sink equals the source");
	my $rows = $sink->dump("public.$table");
	is(join(' ', grep { $rows =~ /"id":$_,/ } @$gap_deleted), '',
		"$label: no row deleted while the slot was lost is left in the sink");
	my $stats = $sink->stats;
	cmp_ok($stats->{rows_swept}, '>=', scalar @$gap_deleted, "$label: the sink swept them");
	is(status($p, 'last_error'), '<null>', "$label: no error left");
	return $stats;
}

# Rows of $table the sink holds and the source deletes now.
sub delete_some
{
	my ($table) = @_;
	my $ids = $node->safe_psql('postgres',
		"WITH d AS (DELETE FROM $table WHERE id % 3 = 0 RETURNING id) SELECT string_agg(id::text, ' ') FROM d");
	return [ split / /, $ids ];
}

my $round = 1;

# ---- (a) max_slot_wal_keep_size invalidates the slot ------------------------
{
	my $label = '(a) max_slot_wal_keep_size';
	my $sink = ReplicantTest::start_sink(name => 'keep');
	create_pipeline('keep', 'keep_t', $sink, '');
	my $slot = status('keep', 'slot_name');
	workload('keep_t', $round++) for 1 .. 5;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.keep_t']),
		"$label: the sink has the first rows");

	$sink->stop;
	workload('keep_t', $round++);
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'keep'"),
		"$label: retrying while its sink is down");
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'; SELECT pg_reload_conf()");
	my $rounds = 0;
	while (status('keep', 'state') ne 'resync_pending' && $rounds++ < 100)
	{
		workload('keep_t', $round++);
		switch_segments(4, 1);
	}
	expect_resync_pending($label, 'keep',
		qr/^replication slot "\Q$slot\E" was invalidated because the WAL it needed was removed$/);
	$node->safe_psql('postgres',
		'ALTER SYSTEM RESET max_slot_wal_keep_size; SELECT pg_reload_conf()');
	# Deletes during the gap, of rows the sink has.
	my $deleted = delete_some('keep_t');
	workload('keep_t', $round++);
	cmp_ok(scalar @$deleted, '>', 0, "$label: rows the sink has deleted during the gap");

	$sink->restart;
	my $stats = expect_resynced($label, 'keep', 'keep_t', $sink, \$round, $deleted);

	# The markers: first (lost_to not known yet), last (the new slot's point).
	my @markers = grep { $_->{snapshot} && $_->{snapshot}{resync} } @{ $stats->{accepted} };
	my ($first) = grep { $_->{snapshot}{first} } @markers;
	my ($last) = grep { $_->{snapshot}{last} } @markers;
	ok($first && $last, "$label: the resync's first and last markers reached the sink");
	like($first->{snapshot}{resync}{reason}, qr/was invalidated because the WAL it needed was removed/,
		"$label: the markers carry the reason");
	like($first->{snapshot}{resync}{lost_from}, qr{^[0-9A-F]+/[0-9A-F]+$}, "$label: and lost_from");
	ok(!defined $first->{snapshot}{resync}{lost_to}, "$label: first: lost_to is null");
	like($last->{snapshot}{resync}{lost_to}, qr{^[0-9A-F]+/[0-9A-F]+$}, "$label: last: lost_to");
	is($node->safe_psql('postgres',
			"SELECT '$last->{snapshot}{resync}{lost_from}'::pg_lsn < '$last->{snapshot}{resync}{lost_to}'::pg_lsn"),
		't', "$label: lost_from < lost_to");

	# A "last" sent again (same id) after rows that came later sweeps nothing.
	my $body = encode_json({ pipeline => 'keep', kind => 'snapshot', changes => [],
			snapshot => $last->{snapshot} });
	my $before = $sink->dump('public.keep_t');
	my $sweeps = $sink->stats->{resyncs_swept};
	my $r = HTTP::Tiny->new->post($sink->{url},
		{ content => $body, headers => { 'content-type' => 'application/json',
				'webhook-id' => $last->{webhook_id} } });
	ok($r->{success}, "$label: the sink accepts a last marker sent again");
	is($sink->dump('public.keep_t'), $before, "$label: and sweeps nothing");
	is($sink->stats->{resyncs_swept}, $sweeps, "$label: it finds its sweep recorded (no second sweep)");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('keep')");
}

# ---- (b) max_retained_wal: the budgeted pipeline gives its slot up -----------
{
	my $label = '(b) max_retained_wal';
	my $down = ReplicantTest::start_sink(name => 'budget');
	my $up = ReplicantTest::start_sink(name => 'healthy');
	create_pipeline('budget', 'budget_t', $down, ", max_retained_wal => '32MB'");
	create_pipeline('healthy', 'healthy_t', $up, '');
	workload('budget_t', $round++) for 1 .. 5;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $down, ['public.budget_t']),
		"$label: the sink has the first rows");
	$down->stop;
	workload('budget_t', $round++);
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'budget'"),
		"$label: retrying while its sink is down");

	my $rounds = 0;
	while (status('budget', 'state') ne 'resync_pending' && $rounds++ < 100)
	{
		workload('budget_t', $round);
		workload('healthy_t', $round++);
		switch_segments(2, 0);
	}
	expect_resync_pending($label, 'budget',
		qr/^replication slot given up: it retained \d+ bytes of WAL, past the pipeline's max_retained_wal of 33554432$/);
	my $deleted = delete_some('budget_t');
	workload('budget_t', $round);
	workload('healthy_t', $round++);
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $up, ['public.healthy_t']),
		"$label: the healthy pipeline missed nothing");
	is($up->stats->{rows_swept}, 0, "$label: and resynced nothing");
	is(status('healthy', 'state'), 'streaming', "$label: it streams on");

	$down->restart;
	expect_resynced($label, 'budget', 'budget_t', $down, \$round, $deleted);
	$node->safe_psql('postgres',
		"SELECT replicant.drop_pipeline('budget'); SELECT replicant.drop_pipeline('healthy')");
}

# ---- (d) an operator drops the pipeline's slot --------------------------------
{
	my $label = '(d) slot dropped';
	my $sink = ReplicantTest::start_sink(name => 'dropped');
	create_pipeline('dropped', 'dropped_t', $sink, '');
	my $slot = status('dropped', 'slot_name');
	workload('dropped_t', $round++) for 1 .. 5;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.dropped_t']),
		"$label: the sink has the first rows");
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('dropped')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'dropped'"),
		"$label: the worker is gone");
	$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$slot')");
	my $deleted = delete_some('dropped_t');
	workload('dropped_t', $round++);
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('dropped')");
	expect_resynced($label, 'dropped', 'dropped_t', $sink, \$round, $deleted);
	like(slurp_file($node->logfile),
		qr/replicant pipeline "dropped" lost its replication slot and resyncs: replication slot "\Q$slot\E" does not exist/,
		"$label: the log says why it resynced");
	my $log = slurp_file($node->logfile);
	like($log, qr/replicant: event=resync_pending pipeline=dropped reason="replication slot \\"\Q$slot\E\\" does not exist/,
		"$label: the resync_pending event line");
	like($log, qr/replicant: event=resync_began pipeline=dropped reason="replication slot \\"\Q$slot\E\\" does not exist[^"]*" lost_from=[0-9A-F]+\/[0-9A-F]+\n/,
		"$label: the resync_began event line");
	like($log, qr/replicant: event=resync_ended pipeline=dropped lsn=[0-9A-F]+\/[0-9A-F]+\n/,
		"$label: the resync_ended event line");
	ok(poll("SELECT value = 2 FROM replicant.metrics WHERE pipeline = 'dropped' AND metric = 'replicant_state'"),
		"$label: replicant_state is 2 (streaming) again");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('dropped')");
}

# ---- (e) idle_replication_slot_timeout (18) -----------------------------------
SKIP:
{
	skip 'idle_replication_slot_timeout is new in PostgreSQL 18', 9
	  unless ReplicantTest::server_has_setting($node, 'idle_replication_slot_timeout');
	my $label = '(e) idle_replication_slot_timeout';
	my $sink = ReplicantTest::start_sink(name => 'idle');
	create_pipeline('idle', 'idle_t', $sink, '');
	my $slot = status('idle', 'slot_name');
	workload('idle_t', $round++) for 1 .. 5;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.idle_t']),
		"$label: the sink has the first rows");
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('idle')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'idle'"),
		"$label: the worker is gone");
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET idle_replication_slot_timeout = '1s'; SELECT pg_reload_conf()");
	ok(poll("CHECKPOINT; SELECT invalidation_reason = 'idle_timeout' FROM pg_replication_slots WHERE slot_name = '$slot'"),
		"$label: a checkpoint invalidated the idle slot");
	$node->safe_psql('postgres',
		'ALTER SYSTEM RESET idle_replication_slot_timeout; SELECT pg_reload_conf()');
	my $deleted = delete_some('idle_t');
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('idle')");
	expect_resynced($label, 'idle', 'idle_t', $sink, \$round, $deleted);
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('idle')");
}

# ---- (r) resync_pipeline() under load -----------------------------------------
{
	my $label = '(r) resync_pipeline';
	my $sink = ReplicantTest::start_sink(name => 'requested');
	$node->safe_psql('postgres', q{
CREATE TABLE req_t (id int PRIMARY KEY, v text);
CREATE TABLE req_k (v text);  -- no key: a bag of rows
CREATE PUBLICATION req_pub FOR TABLE req_t, req_k;
});
	# on_slot_loss stays 'halt': resync_pipeline() does not depend on it.
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('req', 'req_pub', '$sink->{url}', batch_max_bytes => 4096)");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'req'"),
		"$label: streaming");
	workload('req_t', $round++) for 1 .. 20;
	$node->safe_psql('postgres', "INSERT INTO req_k SELECT 'k' || g FROM generate_series(1, 50) g");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'public.req_t', 'public.req_k' ]),
		"$label: the sink has the first rows");

	# The load: a transaction per round, inserts, updates and deletes.
	my $base = 100_000;
	my ($out, $err) = ('', '');
	my $load = IPC::Run::start(
		[ 'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', 'postgres', '-c',
			"DO \$\$ BEGIN FOR r IN 1 .. 400 LOOP"
			  . " INSERT INTO req_t SELECT $base + r * 10 + g, '$MARK' FROM generate_series(1, 10) g;"
			  . " UPDATE req_t SET v = v || 'x' WHERE id % 13 = r % 13;"
			  . " DELETE FROM req_t WHERE id % 17 = r % 17 AND id < $base + r * 10;"
			  . " INSERT INTO req_k VALUES ('k' || r);"
			  . " PERFORM pg_sleep(0.01); COMMIT; END LOOP; END \$\$;" ],
		'>', \$out, '2>', \$err);
	ok(poll("SELECT count(*) > 0 FROM req_t WHERE id > $base"), "$label: the load runs");
	# A resync of tables this small can begin and end between two polls of
	# its state: its event line says it began.
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('req')");
	ok(eval { $node->wait_for_log(qr/event=resync_began pipeline=req reason=requested/, $log_offset) },
		"$label: the pipeline resyncs");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'req'", 180),
		"$label: and streams again");
	$load->finish;
	is($err, '', "$label: the load ran to its end");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'public.req_t', 'public.req_k' ]),
		"$label: the sink equals the source, the key-less table too");
	my @markers = grep { $_->{snapshot} && $_->{snapshot}{resync} } @{ $sink->stats->{accepted} };
	is(scalar(grep { $_->{snapshot}{resync}{reason} eq 'requested' } @markers), 4,
		"$label: first and last markers of both tables say 'requested'");

	# A halted pipeline is resynced too: the halt goes with the old slot.
	my $slot = status('req', 'slot_name');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('req')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'req'"),
		"$label: disabled");
	$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$slot')");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('req')");
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'req'"),
		"$label: with on_slot_loss 'halt' the lost slot halts it");
	$node->safe_psql('postgres', "DELETE FROM req_t WHERE id % 2 = 0");
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('req')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'req'", 180),
		"$label: resync_pipeline resyncs the halted pipeline");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'public.req_t', 'public.req_k' ]),
		"$label: and the sink equals the source");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('req')");
}

# ---- (k) the worker killed in the middle of a resync's reads -------------------
{
	my $label = '(k) killed while resyncing';
	my $sink = ReplicantTest::start_sink(name => 'killed');
	$node->safe_psql('postgres', q{
CREATE TABLE big_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION big_pub FOR TABLE big_t;
});
	$node->safe_psql('postgres',
		"INSERT INTO big_t SELECT g, '$MARK ' || g FROM generate_series(1, 20000) g");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('big', 'big_pub', '$sink->{url}', snapshot => 'initial',"
		  . " batch_max_bytes => 2048, snapshot_workers => 1)");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.big_t']),
		"$label: the initial snapshot is delivered");
	$sink->control({ delay_ms => 5 });
	$node->safe_psql('postgres', "DELETE FROM big_t WHERE id % 4 = 0");
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('big')");
	ok(poll("SELECT b.rows_done > 500 FROM replicant.backfill_status b, replicant.status s"
			  . " WHERE b.pipeline = 'big' AND s.pipeline = 'big' AND s.state = 'resyncing'"
			  . "   AND b.state = 'running'", 120),
		"$label: the resync reads");
	my $pid = status('big', 'worker_pid');
	kill 'KILL', $pid;
	ok(poll("SELECT state = 'resyncing' AND worker_pid IS NOT NULL AND worker_pid <> $pid"
			  . " FROM replicant.status WHERE pipeline = 'big'", 120),
		"$label: after the crash the resync goes on");
	$sink->control({ delay_ms => 0 });
	$node->safe_psql('postgres', "UPDATE big_t SET v = v || ' after' WHERE id % 7 = 0");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'big'", 180),
		"$label: the resync ends");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.big_t']),
		"$label: the sink equals the source");
	# Between the resync's first and last markers the sink got nothing but reads.
	my @acc = @{ $sink->stats->{accepted} };
	my @marks = grep { ref $acc[$_]{snapshot} && $acc[$_]{snapshot}{resync} } 0 .. $#acc;
	my ($fi) = grep { $acc[$_]{snapshot}{first} } @marks;
	my ($li) = reverse grep { $acc[$_]{snapshot}{last} } @marks;
	ok(defined $fi && defined $li && $fi < $li, "$label: the accepted log has the resync's first and last");
	is(scalar(grep { $acc[$_]{kind} ne 'snapshot' } ($fi // 0) .. ($li // -1)), 0,
		"$label: no change batch reached the sink between them");
	like(slurp_file($node->logfile), qr/replicant pipeline "big" resumes its initial snapshot under a fresh snapshot/,
		"$label: the resync was resumed, not started over");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('big')");
}

# ---- (h) a crash on either side of the old slot's drop ---------------------------
# Held at a fault point, the worker is killed (the server restarts): before
# the drop (after the probe) the restarted worker plans and probes again and
# drops the old slot; after it (recorded, the new slot not made yet) it
# plans again and makes the new slot.  Either way the sink ends equal.
foreach my $point ('slot_drop', 'resync_slot_dropped')
{
	my $label = "(h) killed at $point";
	my $p = "h_$point";
	my $sink = ReplicantTest::start_sink(name => $p);
	create_pipeline($p, "${p}_t", $sink, '');
	my $slot = status($p, 'slot_name');
	workload("${p}_t", $round++) for 1 .. 5;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ["public.${p}_t"]),
		"$label: the sink has the first rows");
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET replicant.fault_point = '$point:hold'; SELECT pg_reload_conf()");
	# Deleted while the sink is away: nothing streams them before the resync.
	$sink->stop;
	my $deleted = delete_some("${p}_t");
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = '$p'"),
		"$label: retrying while its sink is down");
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('$p')");
	$sink->restart;
	ok($node->wait_for_log(qr/fault point "$point" reached, holding/, $log_offset),
		"$label: the worker holds there");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'"),
		$point eq 'slot_drop' ? '1' : '0',
		"$label: the old slot " . ($point eq 'slot_drop' ? 'is still there' : 'is gone'));
	is(status($p, 'state'), $point eq 'slot_drop' ? 'resync_pending' : 'resyncing',
		"$label: status shows it");
	kill 'KILL', status($p, 'worker_pid');
	$log_offset = -s $node->logfile;
	ok($node->wait_for_log(qr/fault point "$point" reached, holding|replicant pipeline "$p" finished its resync/,
			$log_offset),
		"$label: after the server's restart the resync goes on");
	$node->safe_psql('postgres',
		'ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()');
	expect_resynced($label, $p, "${p}_t", $sink, \$round, $deleted);
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('$p')");
}

# ---- the option ---------------------------------------------------------------
{
	my $sink = ReplicantTest::start_sink(name => 'opt');
	$node->safe_psql('postgres', "CREATE PUBLICATION opt_pub FOR TABLE filler");
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT replicant.create_pipeline('opt', 'opt_pub', '$sink->{url}', on_slot_loss => 'heal')");
	like($err, qr/on_slot_loss must be "halt" or "resync"/, 'on_slot_loss is checked');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('opt', 'opt_pub', '$sink->{url}', on_slot_loss => 'resync')");
	like($node->safe_psql('postgres', 'SELECT replicant.pipeline_definitions()'),
		qr/on_slot_loss => 'resync'\);/, 'pipeline_definitions shows on_slot_loss');
	$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('opt', on_slot_loss => 'halt')");
	unlike($node->safe_psql('postgres', 'SELECT replicant.pipeline_definitions()'),
		qr/on_slot_loss/, "alter_pipeline sets it back to 'halt', the default");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('opt')");
}

# ---- no row value anywhere ---------------------------------------------------
unlike(slurp_file($node->logfile), qr/\Q$MARK\E/, 'no row value in the server log');

done_testing();
