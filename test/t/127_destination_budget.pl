# A destination's WAL budget is its own (issue #34 item 2,
# docs/destinations-design.md §4): a destination whose sink is more than
# its max_retained_wal behind, while the slot retains that much, gives its
# hold on the slot up and halts alone; the others stream on and the slot
# moves past its checkpoint.  A resume cannot bring it back (the WAL it
# missed is gone); a killed worker does not either.  A destination halted
# for another cause gives its hold up the same way, keeping its reason.
# When every destination holding the slot is past its budget, the slot is
# given up and the pipeline halts, as with one destination.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('dest_budget',
	initdb_extra => ['--wal-segsize=1'],
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0\n"
	  . "max_wal_size = 32MB\nmin_wal_size = 4MB");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');
my $sink_c = ReplicantTest::start_sink(name => 'sink_c');
my $budget = 4 * 1024 * 1024;

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE TABLE w (id int PRIMARY KEY, v text);
	CREATE TABLE pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
	CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
	CREATE TABLE pt2 PARTITION OF pt FOR VALUES FROM (100) TO (200);
	CREATE PUBLICATION pub FOR TABLE t, w, pt WITH (publish_via_partition_root = true);
	CREATE TABLE filler (id serial PRIMARY KEY, v text);
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}')");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'b', '$sink_b->{url}', max_retained_wal => '4MB',"
	  . " http_timeout_ms => 2000, connect_timeout_ms => 500)");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'c', '$sink_c->{url}', max_retained_wal => '6MB')");

$node->safe_psql('postgres', "INSERT INTO w SELECT g, 'w' || g FROM generate_series(1, 10) g;"
	  . " INSERT INTO pt SELECT g, 'p' || g FROM generate_series(1, 10) g UNION ALL SELECT g, 'p' || g FROM generate_series(101, 110) g");

sub poll { return ReplicantTest::poll($node, @_); }

sub dest
{
	my ($d, $column) = @_;
	return $node->safe_psql('postgres',
		"SELECT $column FROM replicant.destination_status WHERE pipeline = 'p' AND destination = '$d'");
}

sub checkpoint_end
{
	my ($d) = @_;
	return $node->safe_psql('postgres',
		"SELECT c.end_lsn FROM replicant.checkpoints c JOIN replicant.destinations d ON d.id = c.destination_id"
		  . " WHERE d.name = '$d'");
}

my $n = 0;
sub insert
{
	my ($count) = @_;
	my $sql = '';
	for (1 .. $count)
	{
		$n++;
		$sql .= "INSERT INTO t VALUES ($n, 'v$n');\n";
	}
	$node->safe_psql('postgres', $sql);
}

sub has_all { return $_[0]->has_ids('public.t', 1, $n); }

# One more 1 MB WAL segment per round, with a published row that a
# streaming destination gets before the next round (so the worker has
# looked at the slot since: $pace, by default p's row to the default
# destination), until $done (a query) is true; at most 60 rounds.
sub write_wal_until
{
	my ($done, $pace) = @_;
	$pace //= sub { insert(1); return has_all($sink_a); };
	for (1 .. 60)
	{
		return 1 if $node->safe_psql('postgres', $done) eq 't';
		$node->safe_psql('postgres', "INSERT INTO filler (v) VALUES ('x'); SELECT pg_switch_wal();");
		$pace->() or return 0;
	}
	return poll($done, 60);
}

my $slot = ReplicantTest::slot_name($node, 'postgres', 'p');

insert(5);
ok(has_all($sink_a) && has_all($sink_b) && has_all($sink_c), 'three destinations stream');
is(dest('b', 'holds_slot'), 't', 'b holds the slot');

# ---- 1. b's sink is down: past its budget, b gives its hold up alone ----
my $offset = -s $node->logfile;
$sink_b->control({ fail_status => 503 });
insert(3);
ok(poll("SELECT state = 'retrying' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'b'", 60),
	'b is retrying');
my $b_end = checkpoint_end('b');
ok(write_wal_until("SELECT state = 'halted' FROM replicant.destination_status"
		  . " WHERE pipeline = 'p' AND destination = 'b'"),
	'b halts once it is past its budget');
like(dest('b', 'last_error'),
	qr/^replication slot given up for this destination: its sink is \d+ bytes of WAL behind, past its max_retained_wal of $budget$/,
	'its reason says why, without a value');
is(dest('b', 'holds_slot'), 'f', 'b no longer holds the slot');
is(dest('default', 'holds_slot') . dest('c', 'holds_slot'), 'tt', 'the others do');
$node->wait_for_log(qr/event=slot_released pipeline=p destination=b /, $offset);
ok(1, 'the release is logged as an event');
insert(5);
ok(has_all($sink_a) && has_all($sink_c), 'the others get every transaction');
is(dest('default', 'state') . ',' . dest('c', 'state'), 'streaming,streaming', 'and stream on');
ok(poll("SELECT confirmed_flush_lsn > '$b_end' FROM pg_replication_slots WHERE slot_name = '$slot'", 60),
	"the slot moves past b's checkpoint");
# restart_lsn follows at the next running-transactions record decoded past
# the confirmed position: a checkpoint writes one, a commit gets it decoded.
my $freed = 0;
for (1 .. 60)
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	insert(1);
	has_all($sink_a) or last;
	$freed = $node->safe_psql('postgres', "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) < $budget"
		  . " FROM pg_replication_slots WHERE slot_name = '$slot'") eq 't' and last;
}
ok($freed, 'and retains less than the budget again');
is($node->safe_psql('postgres', "SELECT max_retained_wal FROM replicant.status WHERE pipeline = 'p'"),
	6 * 1024 * 1024, "status's budget is the smallest of the destinations holding the slot");
insert(1);
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000)"),
	't', 'await_delivered waits for the destinations holding the slot only');

# A resume cannot bring it back: what it missed is no longer kept.
$sink_b->control({ clear => 1 });
my ($rc, $out, $err) = $node->psql('postgres', "SELECT replicant.resume_pipeline('p', 'b')");
isnt($rc, 0, 'resume_pipeline(p, b) is refused');
like($err, qr/destination "b" of pipeline "p" gave its hold on the replication slot up/, 'with the reason');
like($err, qr/HINT:.*resync_pipeline\('p', 'b'\)/, 'and the way out');
$node->psql('postgres', "SELECT replicant.resume_pipeline('p')");
is(dest('b', 'state'), 'halted', 'resuming the pipeline leaves b halted');
($rc, $out, $err) = $node->psql('postgres', "SELECT replicant.backfill('p', 't', destination => 'b')");
like($err, qr/destination "b" of pipeline "p" gave its hold on the replication slot up/,
	'a backfill for b alone is refused too (it would be done with nothing delivered)');

# Nor does a killed worker.
my $b_deliveries = scalar @{ $sink_b->txlog };
my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ReplicantTest::kill_worker($node, $pid);
insert(3);
ok(has_all($sink_a) && has_all($sink_c), 'after a crash, the others get every transaction');
insert(1);
ok(has_all($sink_a) && has_all($sink_c), 'and what commits next');
is(dest('b', 'state') . dest('b', 'holds_slot'), 'halted' . 'f', 'b stays released');
is(scalar @{ $sink_b->txlog }, $b_deliveries, "b's sink gets nothing more");

# ---- 1b. resync_pipeline(p, b) brings b back --------------------------------
# b streams again from the WAL insert position while every table is read
# again for it alone, beside the others' stream; the first and last markers
# of its reads carry the resync, and its sink sweeps the rows it was not
# sent again: those deleted while it was away.  pt's two partitions are
# read as two tables delivered under one name: every first marker goes
# before any read and every last after all of them, or one partition's
# sweep would remove the other's rows.
$node->safe_psql('postgres', "DELETE FROM w WHERE id <= 3; UPDATE w SET v = 'changed' WHERE id = 4;"
	  . " INSERT INTO w VALUES (11, 'w11'); DELETE FROM pt WHERE id = 105");
insert(2);
ok(has_all($sink_a) && has_all($sink_c), 'the others get the changes b misses');
is($sink_b->stats->{rows_swept}, 0, "b's sink swept nothing yet");
my $a_duplicates = $sink_a->stats->{duplicate_transactions};
# t's first chunk for b is held in its window (its low watermark written)
# while one of its rows is updated: the stream sends b the update after the
# table's first marker, so its sink keeps the row; the chunk drops it.
# Its sink takes the first first marker and refuses the next one once: the
# markers are recorded together, so no read is marked alone and the resync
# goes on (a read left unmarked beside marked ones would begin it again).
$offset = -s $node->logfile;
$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'backfill_window:hold'; SELECT pg_reload_conf()");
$sink_b->control({ fail_status => 503, fail_first => 1, fail_skip => 1 });
$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('p', 'b')");
$node->wait_for_log(qr/fault point "backfill_window" reached, holding/, $offset);
$node->safe_psql('postgres', "UPDATE t SET v = 'in the window' WHERE id = 2");
($rc, $out, $err) = $node->psql('postgres', "SELECT replicant.cancel_backfill(max(b.id)) FROM replicant.backfills b"
	  . " JOIN replicant.destinations d ON d.id = b.destination_id WHERE d.name = 'b'");
like($err, qr/backfill \d+ reads a table for the resync of destination "b"/, 'a read of the resync cannot be cancelled alone');
($rc, $out, $err) = $node->psql('postgres', "SELECT replicant.backfill('p', 'w', destination => 'b')");
like($err, qr/destination "b" of pipeline "p" is resyncing/, 'nor is a backfill for b planned beside its resync');
$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()");
is(dest('b', 'holds_slot'), 't', 'b holds the slot again');
is($sink_b->control->{failed_so_far}, 1, "b's sink refused one request during the first markers");
$sink_b->control({ clear => 1 });
insert(3);
$node->safe_psql('postgres', "UPDATE w SET v = 'during' WHERE id = 5; INSERT INTO w VALUES (12, 'w12')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_b, [ 'public.t', 'public.w', 'public.pt' ], 120),
	"b's sink equals the source: every table read again");
ok(poll("SELECT state = 'streaming' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'b'", 60),
	'and its resync ends');
$node->wait_for_log(qr/event=resync_ended pipeline=p destination=b/, $offset);
ok(1, 'logged as an event');
unlike(slurp_file($node->logfile, $offset), qr/starts its resync over/, 'the refused marker did not begin the resync again');
is($sink_b->stats->{rows_swept}, 4, 'its sink swept exactly the four rows deleted while it was away');
is($sink_b->stats->{resyncs_swept}, 4, 'once per table read (each partition)');
is($sink_b->stats->{watermark_resets}, 0, 'and kept its watermark: the stream went on beside the reads');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ 'public.t', 'public.w', 'public.pt' ], 60)
	  && ReplicantTest::wait_until_synced($node, 'postgres', $sink_c, [ 'public.t', 'public.w', 'public.pt' ], 60),
	'the others stream on beside it');
is($sink_a->stats->{duplicate_transactions}, $a_duplicates, 'and get nothing twice');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.backfills b JOIN replicant.destinations d"
	  . " ON d.id = b.destination_id WHERE d.name = 'b' AND b.state = 'done'"), '4', "b's reads are four backfills, done");

# ---- 1c. with on_slot_loss => 'resync', b resyncs alone past its budget ----
$node->safe_psql('postgres', "SELECT replicant.alter_destination('p', 'b', on_slot_loss => 'resync')");
ok(has_all($sink_b), 'b streams after the change');
$offset = -s $node->logfile;
$sink_b->control({ fail_status => 503 });
insert(1);
$node->safe_psql('postgres', "DELETE FROM w WHERE id = 6");
ok(write_wal_until("SELECT count(*) = 1 FROM replicant.destinations WHERE name = 'b' AND resync_reason IS NOT NULL"),
	'past its budget, b resyncs instead of giving its hold up');
$node->wait_for_log(qr/event=resync_began pipeline=p destination=b reason=/, $offset);
ok(1, 'logged as an event');
is(dest('b', 'holds_slot'), 't', 'it holds the slot from where it streams again');
$sink_b->control({ clear => 1 });
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_b, [ 'public.t', 'public.w', 'public.pt' ], 120),
	"once its sink answers, b's sink equals the source");
ok(poll("SELECT state = 'streaming' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'b'", 60),
	'and b streams');
is($sink_b->stats->{rows_swept}, 5, 'the row deleted while it fell behind is swept');
is($node->safe_psql('postgres', "SELECT resync_losses FROM replicant.destinations WHERE name = 'b'"),
	'0', 'a finished resync starts the count of resyncs in a row over');
$node->safe_psql('postgres', "SELECT replicant.alter_destination('p', 'b', on_slot_loss => 'halt')");

# ---- 2. c, halted by its sink's refusal, gives its hold up too -------------
$offset = -s $node->logfile;
$sink_c->control({ fail_status => 400 });
insert(1);
ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'c'", 60),
	'c halts on a 400');
my $c_reason = dest('c', 'last_error');
my $c_end = checkpoint_end('c');
is(dest('c', 'holds_slot'), 't', 'halted, c still holds the slot');
ok(write_wal_until("SELECT NOT holds_slot FROM replicant.destination_status"
		  . " WHERE pipeline = 'p' AND destination = 'c'"),
	'past its budget, c gives its hold up');
is(dest('c', 'last_error'), $c_reason, 'keeping the reason it halted for');
$node->wait_for_log(qr/event=slot_released pipeline=p destination=c /, $offset);
ok(1, "c's release is logged");
insert(2);
ok(has_all($sink_a), 'the default destination gets every transaction');
ok(poll("SELECT confirmed_flush_lsn > '$c_end' FROM pg_replication_slots WHERE slot_name = '$slot'", 60),
	"the slot moves past c's checkpoint");
is(dest('default', 'state'), 'streaming', 'default streams on');
is($node->safe_psql('postgres', "SELECT max_retained_wal FROM replicant.status WHERE pipeline = 'p'"),
	$budget, "c's budget left the floor's; b's, back since its resync, is in it");
insert(1);
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000)"),
	't', 'and with c released too');

# ---- 3. the last destination holding the slot past its budget: the slot goes
# q: d (4MB) down, e (6MB) streaming: d gives its hold up; then e is down
# too, and past its own budget the slot is given up for the pipeline.
$node->safe_psql('postgres', q{
	CREATE TABLE u (id int PRIMARY KEY, v text);
	CREATE PUBLICATION upub FOR TABLE u;
});
my $sink_d = ReplicantTest::start_sink(name => 'sink_d');
my $sink_e = ReplicantTest::start_sink(name => 'sink_e');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('q', 'upub', '$sink_d->{url}', max_retained_wal => '4MB',"
	  . " http_timeout_ms => 2000, connect_timeout_ms => 500, snapshot => 'initial')");
# (the initial snapshot's plan, done, is what §4 (a2) must not resume)
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'q'", 60), "q's initial snapshot is done");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('q', 'e', '$sink_e->{url}', max_retained_wal => '6MB',"
	  . " http_timeout_ms => 2000, connect_timeout_ms => 500)");
my $q_slot = ReplicantTest::slot_name($node, 'postgres', 'q');
my $u = 0;
my $pace_e = sub {
	$u++;
	$node->safe_psql('postgres', "INSERT INTO u VALUES ($u, 'x')");
	for (1 .. 600)
	{
		return 1 if scalar(() = $sink_e->dump('public.u') =~ /"id"/g) == $u;
		select(undef, undef, undef, 0.2);
	}
	return 0;
};
ok($pace_e->(), 'q delivers');
$offset = -s $node->logfile;
$sink_d->control({ fail_status => 503 });
ok(write_wal_until("SELECT NOT holds_slot FROM replicant.destination_status WHERE pipeline = 'q' AND destination = 'default'",
		$pace_e),
	"q's default destination gives its hold up past its 4MB");
$node->wait_for_log(qr/event=slot_released pipeline=q destination=default /, $offset);
ok(1, 'logged');
is($node->safe_psql('postgres', "SELECT state FROM replicant.destination_status WHERE pipeline = 'q' AND destination = 'e'"),
	'streaming', 'e streams on');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$q_slot'"),
	'1', "q's slot stays");
$sink_e->control({ fail_status => 503 });
$node->safe_psql('postgres', "INSERT INTO u VALUES (1000000, 'x')");
ok(write_wal_until("SELECT state = 'halted' AND last_error ~ 'past the pipeline''s max_retained_wal'"
		  . " FROM replicant.status WHERE pipeline = 'q'"),
	'once e, the last one holding the slot, is past its 6MB, q halts');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'q'"),
	qr/^replication slot given up: it retained \d+ bytes of WAL, past the pipeline's max_retained_wal of 6291456$/,
	'the slot was given up for the pipeline, past the budget of the destinations holding it');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$q_slot'"),
	'0', "q's slot is gone");
insert(2);
ok(has_all($sink_a), 'p streams on');

# ---- 4. the pipeline's resync with several destinations ---------------------
# (a) resync_pipeline(q) once its slot is gone: a new slot is made and each
# destination resyncs alone beside its stream, its halt and release
# cleared; the rows deleted meanwhile are swept at both sinks.
$node->safe_psql('postgres', "DELETE FROM u WHERE id IN (1, 2); UPDATE u SET v = 'y' WHERE id = 3");
$sink_d->control({ clear => 1 });
$sink_e->control({ clear => 1 });
$offset = -s $node->logfile;
# resync_pipeline(q): both of q's sinks end equal to the source, and both
# destinations stream and hold the slot.
sub resync_q
{
	my ($label) = @_;
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('q')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_d, ['public.u'], 120)
		  && ReplicantTest::wait_until_synced($node, 'postgres', $sink_e, ['public.u'], 120),
		$label);
	ok(poll("SELECT bool_and(state = 'streaming' AND holds_slot) FROM replicant.destination_status WHERE pipeline = 'q'", 60),
		'both stream and hold the slot');
}
resync_q("after resync_pipeline(q), both of q's sinks equal the source");
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$q_slot'"),
	'1', 'q has a slot again');
is($sink_d->stats->{rows_swept} . ' ' . $sink_e->stats->{rows_swept}, '1 2',
	'each sink swept the deleted rows it held (d had row 1 only, e rows 1 and 2)');
$node->wait_for_log(qr/event=resync_ended pipeline=q destination=e/, $offset);
like(slurp_file($node->logfile, $offset), qr/event=resync_began pipeline=q destination=default reason=requested/,
	"each destination's resync is logged");
# One WAL segment at a time past q's inactive slot, until a checkpoint
# invalidates it (max_slot_wal_keep_size).
sub poll_until_lost
{
	foreach (1 .. 30)
	{
		$node->safe_psql('postgres', "INSERT INTO filler (v) VALUES ('x'); SELECT pg_switch_wal(); CHECKPOINT");
		return 1
		  if $node->safe_psql('postgres', "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '$q_slot'")
		  eq 'lost';
	}
	return 0;
}

sub q_streams
{
	$u++;
	$node->safe_psql('postgres', "INSERT INTO u VALUES ($u, 'x')");
	return ReplicantTest::wait_until_synced($node, 'postgres', $sink_e, ['public.u'], 60);
}
ok(q_streams(), 'q streams');

# Asks for q's resync and lets its worker die once the new slot is made,
# before the destinations' resyncs begin (fault point resync_slot_made);
# then q is disabled, the fault point still set.
sub resync_dies_once_slot_made
{
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'resync_slot_made'; SELECT pg_reload_conf()");
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('q')");
	$node->wait_for_log(qr/fault point "resync_slot_made" reached, exiting/, $offset);
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('q')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'q'"), "q's worker is gone");
	return;
}

# (a2) the worker dies once the new slot is made, before the destinations'
# resyncs begin (fault point resync_slot_made), and e is dropped then: the
# one destination left gets the pipeline's own resync, which drops that
# slot again and reads every table, not a snapshot that was never planned
# (which would start it at the new slot, past a row its sink refused).
$sink_d->control({ fail_status => 503 });
$u++;
$node->safe_psql('postgres', "INSERT INTO u VALUES ($u, 'refused by d')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_e, ['public.u'], 60), 'e has the row d refuses');
resync_dies_once_slot_made();
$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()");
$node->safe_psql('postgres', "SELECT replicant.drop_destination('q', 'e')");
$sink_d->control({ clear => 1 });
$offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('q')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_d, ['public.u'], 120),
	"with e dropped, q's sink equals the source");
like(slurp_file($node->logfile, $offset), qr/event=resync_began pipeline=q reason=requested lost_from=/,
	"the pipeline's resync dropped the slot made before and read the tables again");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('q', 'e', '$sink_e->{url}', max_retained_wal => '6MB',"
	  . " http_timeout_ms => 2000, connect_timeout_ms => 500, snapshot => 'incremental')");

# (b) the slot lost (dropped while q is disabled): e, with on_slot_loss =>
# 'resync', resyncs alone from a new slot; the default destination, whose
# on_slot_loss is 'halt', gives its hold up with the loss for its reason.
$node->safe_psql('postgres', "SELECT replicant.alter_destination('q', 'e', on_slot_loss => 'resync')");
ok(q_streams(), 'q streams after the change');
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('q')");
ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'q'"), "q's worker is gone");
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$q_slot')");
$node->safe_psql('postgres', "DELETE FROM u WHERE id = 3; INSERT INTO u VALUES (2000000, 'z')");
$offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('q')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_e, ['public.u'], 120),
	"after the slot's loss, e's sink equals the source");
ok(poll("SELECT state = 'streaming' FROM replicant.destination_status WHERE pipeline = 'q' AND destination = 'e'", 60),
	'e streams');
is($sink_e->stats->{rows_swept}, 3, 'the row deleted while the slot was lost is swept');
is($node->safe_psql('postgres', "SELECT state || ' ' || holds_slot FROM replicant.destination_status"
	  . " WHERE pipeline = 'q' AND destination = 'default'"), 'halted false', "q's default destination gave its hold up");
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.destination_status WHERE pipeline = 'q' AND destination = 'default'"),
	qr/^replication slot "\Q$q_slot\E" does not exist/, 'for the slot loss');
$node->wait_for_log(qr/event=slot_released pipeline=q destination=default /, $offset);
like(slurp_file($node->logfile, $offset), qr/event=resync_began pipeline=q destination=e /, "e's resync is logged");
is($node->safe_psql('postgres', "SELECT halt_reason IS NULL AND resync_reason IS NULL FROM replicant.pipelines WHERE name = 'q'"),
	't', 'the pipeline itself is neither halted nor resyncing');
ok(q_streams(), 'e gets what follows');

# (c) no loop: a destination whose last 3 resyncs on a loss did not finish
# gives its hold up at the next loss instead; with none left to resync,
# the pipeline halts.
$node->safe_psql('postgres', "UPDATE replicant.destinations SET resync_losses = 3 WHERE name = 'e'");
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('q')");
ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'q'"), "q's worker is gone");
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$q_slot')");
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('q')");
ok(poll("SELECT halt_reason ~ '^no destination of the pipeline can resync .*it resynced 3 times in a row'"
		  . " FROM replicant.pipelines WHERE name = 'q'", 60),
	'after 3 resyncs in a row, e gives its hold up and q halts');
is($node->safe_psql('postgres', "SELECT string_agg(d.name || ' ' || d.slot_released, ', ' ORDER BY d.name)"
	  . " FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'q'"),
	'default true, e false', 'with none resyncing, no destination changed');
# A resync_pipeline() call resyncs them all, halted or released.
resync_q('after the halt, resync_pipeline(q) brings both back');

# (d) the new slot, made before the worker died, is invalidated before the
# destinations' resyncs begin: it is made again, and the request stays a
# request (default, whose on_slot_loss is 'halt', resyncs too).
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
resync_dies_once_slot_made();
$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point;"
	  . " ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'; SELECT pg_reload_conf()");
ok(poll_until_lost(), "q's new slot is invalidated");
$node->safe_psql('postgres', "ALTER SYSTEM RESET max_slot_wal_keep_size; SELECT pg_reload_conf()");
$node->safe_psql('postgres', "DELETE FROM u WHERE id = 4");
$offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('q')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_d, ['public.u'], 120)
	  && ReplicantTest::wait_until_synced($node, 'postgres', $sink_e, ['public.u'], 120),
	"with the slot made again, both of q's sinks equal the source");
ok(poll("SELECT bool_and(state = 'streaming' AND holds_slot) FROM replicant.destination_status WHERE pipeline = 'q'", 60),
	'both stream and hold the slot: the request was not taken for a loss');
like(slurp_file($node->logfile, $offset), qr/makes its new replication slot again: replication slot "\Q$q_slot\E" was invalidated/,
	'the lost slot was made again');

done_testing();
