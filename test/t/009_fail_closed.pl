# Fail-closed halts (docs/internals.md §8): each condition halts its pipeline
# with a clear, value-free last_error; the halt survives a server restart;
# once the cause is fixed, resume_pipeline (or, for a lost slot, drop and
# create) makes the pipeline continue and later changes arrive.
#
#   slot invalidated (WAL removed past max_slot_wal_keep_size)
#   publication dropped, then created again
#   a published table's column dropped (also across a server restart)
#   replica identity changed; while halted on one shape change, another
#     (a resume accepts the shape its halt named, no other)
#   the pipeline owner's SELECT revoked, and row-level security enabled
#   the slot moved by another role (pg_replication_slot_advance()); not
#     when the worker moved it, nor after a crash
#   a row that cannot be encoded (non-UTF-8 bytes in an SQL_ASCII database)
#   drop_pipeline of a halted pipeline and of one in the middle of a POST
#
# Every row value carries a marker; neither last_error nor the server log
# (default logging: log_statement = none) may ever show it.
#
# versions: all (slot invalidation, src/compat.h)
use strict;
use warnings;
use Time::HiRes qw(time usleep);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $MARK = 'ROWVAL-9d2e41';
my $HALT_S = 30;    # a halt shows within this many seconds

my $started = time();
# 1 MB WAL segments, so a few segment switches exceed max_slot_wal_keep_size.
my $node = ReplicantTest::new_node('failclosed',
	initdb_extra => ['--wal-segsize=1'],
	conf => "log_statement = none\nmax_wal_size = 32MB\nmin_wal_size = 4MB");
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', 'CREATE EXTENSION replicant');

# ---- helpers ----------------------------------------------------------------

# Polls a boolean query until it is true or $timeout seconds pass; connection
# errors (a restarting server) just mean "not yet".
sub poll { return ReplicantTest::poll($node, @_); }

sub status
{
	my ($p, $db) = @_;
	my $row = $node->safe_psql($db // 'postgres',
		"SELECT state, coalesce(last_error, '<null>'), coalesce(worker_pid, 0)"
		  . " FROM replicant.status WHERE pipeline = '$p'");
	my %s;
	@s{qw(state last_error worker_pid)} = split /\|/, $row, 3;
	$s{state} //= '<no pipeline>';
	$s{last_error} //= '';
	return \%s;
}

sub workers_running
{
	my ($p) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'replicant pipeline $p'");
}

sub create_pipeline
{
	my ($p, $pub, %o) = @_;
	my $url = $o{url} // $sink->{url};
	$node->safe_psql($o{db} // 'postgres',
		($o{role} ? "SET ROLE $o{role};\n" : '')
		  . "SELECT replicant.create_pipeline('$p', '$pub', '$url',"
		  . " http_timeout_ms => " . ($o{http_timeout_ms} // 2000) . ", connect_timeout_ms => 500)");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'",
			30, $o{db}),
		"$p: pipeline streaming");
}

# The sink's stored row of $table with this id (canonical JSON), or ''.
sub sink_row
{
	my ($table, $id, $s) = @_;
	my @rows = grep { /"id":$id[,}]/ } split /\n/, ($s // $sink)->dump($table);
	return $rows[0] // '';
}

sub wait_sink_row
{
	my ($table, $id, $timeout) = @_;
	my $deadline = time() + ($timeout // 30);
	while (time() < $deadline)
	{
		my $row = sink_row($table, $id);
		return $row if $row ne '';
		usleep(100_000);
	}
	return '';
}

# Waits until the sink's row of $table with this id matches $re; returns it.
sub wait_sink_match
{
	my ($table, $id, $re) = @_;
	my $deadline = time() + 30;
	my $row = '';
	while (time() < $deadline)
	{
		$row = sink_row($table, $id);
		return $row if $row =~ $re;
		usleep(100_000);
	}
	return $row;
}

# Waits for the halt and checks its reason.
sub expect_halt
{
	my ($label, $p, $re, $db) = @_;
	my $ok = ok(
		poll("SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status"
			  . " WHERE pipeline = '$p'", $HALT_S, $db),
		"$label: the pipeline halts, its worker exits");
	my $s = status($p, $db);
	diag("$label: state $s->{state}, last_error $s->{last_error}") unless $ok;
	like($s->{last_error}, $re, "$label: last_error says why ($s->{last_error})");
	unlike($s->{last_error}, qr/\Q$MARK\E/, "$label: last_error holds no row value");
	return $ok;
}

# Restarts the server: the halt (and its reason) must survive.
sub halted_across_restart
{
	my ($label, $p, $re, $db) = @_;
	$db //= 'postgres';
	$node->restart;
	# Once the sync worker mirrored the database's pipelines into shared
	# memory, the launcher has decided which workers to start.
	ok( poll("SELECT count(*) = (SELECT count(*) FROM replicant.pipelines)"
			  . " FROM replicant._worker_status()", 30, $db),
		"$label: the launcher saw the pipelines after the restart");
	sleep 2;
	my $s = status($p, $db);
	is($s->{state}, 'halted', "$label: still halted after a server restart");
	like($s->{last_error}, $re, "$label: with its reason");
	is($s->{worker_pid}, 0, "$label: no worker pid");
	is(workers_running($p), '0', "$label: no worker runs");
}

sub resume
{
	my ($p, $db) = @_;
	$node->safe_psql($db // 'postgres', "SELECT replicant.resume_pipeline('$p')");
}

sub expect_streaming
{
	my ($label, $p, $db) = @_;
	my $ok = ok(
		poll("SELECT state = 'streaming' AND last_error IS NULL FROM replicant.status"
			  . " WHERE pipeline = '$p'", 30, $db),
		"$label: streaming again, last_error NULL");
	diag("$label: " . halt_info($p, $db)) unless $ok;
	return $ok;
}

sub halt_info
{
	my ($p, $db) = @_;
	return $node->safe_psql($db // 'postgres',
		"SELECT format('state %s, halt_reason %s, halt_lsn %s, resumed_lsn %s',"
		  . " s.state, p.halt_reason, p.halt_lsn, p.resumed_lsn)"
		  . " FROM replicant.pipelines p JOIN replicant.status s ON s.pipeline = p.name"
		  . " WHERE p.name = '$p'");
}

# Diagnostics only, after the checks: how many more resume_pipeline calls
# it takes until the pipeline streams (each one logged).
sub resumes_needed
{
	my ($label, $p, $max) = @_;
	for my $n (1 .. $max)
	{
		return if status($p)->{state} ne 'halted';
		resume($p);
		sleep 2;
		diag("$label: after $n more resume(s): " . halt_info($p));
	}
}

sub slot_count
{
	my ($p, $db) = @_;
	my $slot = ReplicantTest::slot_name($node, $db // 'postgres', $p);
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'");
}

sub drop_pipeline
{
	my ($label, $p, $db) = @_;
	$node->safe_psql($db // 'postgres', "SELECT replicant.drop_pipeline('$p')");
	is(slot_count($p, $db), '0', "$label: drop_pipeline leaves no slot");
	ok(poll("SELECT count(*) = 0 FROM pg_stat_activity"
			  . " WHERE application_name = 'replicant pipeline $p'", 10),
		"$label: and no worker");
}

# ---- slot invalidated: the WAL it needed was removed -------------------------
{
	my $label = 'slot invalidated';
	$node->safe_psql('postgres', q{
CREATE TABLE lost_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION lost_pub FOR TABLE lost_t;
CREATE TABLE filler (id serial PRIMARY KEY, v text);
});
	create_pipeline('lost', 'lost_pub');
	$node->safe_psql('postgres', "INSERT INTO lost_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.lost_t', 1), '', "$label: delivered before the outage");

	# The sink goes away: the batch holding row 2 is retried and the slot
	# stays where it is while unpublished writes fill segment after segment.
	$sink->stop;
	$node->safe_psql('postgres', "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'; SELECT pg_reload_conf()");
	$node->safe_psql('postgres', "INSERT INTO lost_t VALUES (2, '$MARK 2')");
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'lost'", 30),
		"$label: retrying while the sink is down");
	my $wal_status = '';
	my $slot = ReplicantTest::slot_name($node, 'postgres', 'lost');
	for my $round (1 .. 40)
	{
		$node->safe_psql('postgres',
			"INSERT INTO filler (v) SELECT md5(g::text) FROM generate_series(1, 2000) g;"
			  . " SELECT pg_switch_wal(); CHECKPOINT;");
		$wal_status = $node->safe_psql('postgres',
			"SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = '$slot'");
		last if $wal_status eq 'lost';
	}
	is($wal_status, 'lost', "$label: pg_replication_slots says the slot is lost");
	expect_halt($label, 'lost',
		qr/^replication slot "\Q$slot\E" was invalidated because the WAL it needed was removed$/);
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET max_slot_wal_keep_size; SELECT pg_reload_conf()');
	$sink->restart;    # the pipelines created from here on use its URL
	halted_across_restart($label, 'lost', qr/was invalidated because the WAL it needed was removed/);

	# A lost slot cannot be resumed: resume just halts again, same reason.
	resume('lost');
	expect_halt("$label, resumed", 'lost', qr/was invalidated because the WAL it needed was removed/);

	# The fix is to drop and create the pipeline again.
	drop_pipeline($label, 'lost');
	is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.pipelines WHERE name = 'lost'"),
		'0', "$label: the pipeline row is gone");
	create_pipeline('lost', 'lost_pub');
	$node->safe_psql('postgres', "INSERT INTO lost_t VALUES (3, '$MARK 3')");
	isnt(wait_sink_row('public.lost_t', 3), '', "$label: the new pipeline delivers later changes");
	drop_pipeline("$label, recreated", 'lost');
}

# ---- publication dropped, then created again ---------------------------------
{
	my $label = 'publication dropped';
	$node->safe_psql('postgres', q{
CREATE TABLE pd_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION pd_pub FOR TABLE pd_t;
});
	create_pipeline('pubdrop', 'pd_pub');
	$node->safe_psql('postgres', "INSERT INTO pd_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.pd_t', 1), '', "$label: delivered before");

	$node->safe_psql('postgres', 'DROP PUBLICATION pd_pub');
	$node->safe_psql('postgres', "INSERT INTO pd_t VALUES (2, '$MARK 2')");
	expect_halt($label, 'pubdrop', qr/^publication "pd_pub" does not exist$/);
	# More writes while halted and the publication is still missing.
	$node->safe_psql('postgres', "INSERT INTO pd_t VALUES (3, '$MARK 3')");
	$node->safe_psql('postgres', "UPDATE pd_t SET v = '$MARK 3b' WHERE id = 3");
	halted_across_restart($label, 'pubdrop', qr/^publication "pd_pub" does not exist$/);

	$node->safe_psql('postgres', 'CREATE PUBLICATION pd_pub FOR TABLE pd_t');
	$node->safe_psql('postgres', "INSERT INTO pd_t VALUES (4, '$MARK 4')");
	resume('pubdrop');
	expect_streaming($label, 'pubdrop');
	isnt(wait_sink_row('public.pd_t', 4), '',
		"$label: a change committed after the publication was created again arrives");
	$node->safe_psql('postgres', "INSERT INTO pd_t VALUES (5, '$MARK 5')");
	isnt(wait_sink_row('public.pd_t', 5), '', "$label: and so do later ones");
	resumes_needed($label, 'pubdrop', 4);
	drop_pipeline($label, 'pubdrop');
}

# ---- a published table's column dropped ---------------------------------------
{
	my $label = 'column dropped';
	$node->safe_psql('postgres', q{
CREATE TABLE cd_t (id int PRIMARY KEY, a text, b text, c text);
CREATE PUBLICATION cd_pub FOR TABLE cd_t;
});
	create_pipeline('coldrop', 'cd_pub');
	$node->safe_psql('postgres', "INSERT INTO cd_t VALUES (1, '$MARK a1', '$MARK b1', '$MARK c1')");
	like(wait_sink_row('public.cd_t', 1), qr/"b":/, "$label: delivered with column b");

	$node->safe_psql('postgres', 'ALTER TABLE cd_t DROP COLUMN b');
	$node->safe_psql('postgres', "INSERT INTO cd_t VALUES (2, '$MARK a2', '$MARK c2')");
	expect_halt($label, 'coldrop', qr/^column "b" of table "cd_t" was dropped or renamed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	is(sink_row('public.cd_t', 2), '', "$label: the change after the drop was not delivered");
	$node->safe_psql('postgres', "INSERT INTO cd_t VALUES (3, '$MARK a3', '$MARK c3')");
	halted_across_restart($label, 'coldrop', qr/^column "b" of table "cd_t" was dropped or renamed; replicant\.resume_pipeline\(\) accepts the new shape$/);

	resume('coldrop');
	expect_streaming($label, 'coldrop');
	$node->safe_psql('postgres', "INSERT INTO cd_t VALUES (4, '$MARK a4', '$MARK c4')");
	for my $id (2, 3, 4)
	{
		my $row = wait_sink_row('public.cd_t', $id);
		like($row, qr/^\{"a":"[^"]*","c":"[^"]*","id":$id\}$/,
			"$label: row $id arrives with the new shape");
	}

	# The same drop, right after a server restart: the new worker has not
	# seen the table yet when the drop happens, and compares it with the
	# shape saved with the checkpoint (replicant.table_shapes).
	$label = 'column dropped after a restart';
	$node->safe_psql('postgres', "INSERT INTO cd_t VALUES (5, '$MARK a5', '$MARK c5')");
	isnt(wait_sink_row('public.cd_t', 5), '', "$label: delivered before");
	ok(poll("SELECT shape = c.reltype::text || '/d:id,|id,a,c,' FROM replicant.table_shapes s"
			  . " JOIN pg_class c ON c.oid = s.relid"
			  . " JOIN replicant.pipelines p ON p.id = s.pipeline_id"
			  . " WHERE p.name = 'coldrop' AND s.relid = 'cd_t'::regclass", 10),
		"$label: the shape delivered is saved with the checkpoint");
	$node->restart;
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'coldrop'", 30),
		"$label: streaming after the restart");
	$node->safe_psql('postgres', 'ALTER TABLE cd_t DROP COLUMN a');
	$node->safe_psql('postgres', "INSERT INTO cd_t VALUES (6, '$MARK c6')");
	expect_halt($label, 'coldrop', qr/^column "a" of table "cd_t" was dropped or renamed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	is(sink_row('public.cd_t', 6), '', "$label: the change after the drop was not delivered");
	resume('coldrop');
	expect_streaming($label, 'coldrop');
	like(wait_sink_row('public.cd_t', 6), qr/^\{"c":"[^"]*","id":6\}$/,
		"$label: row 6 arrives with the new shape after the resume");
	ok(poll("SELECT shape = c.reltype::text || '/d:id,|id,c,' FROM replicant.table_shapes s"
			  . " JOIN pg_class c ON c.oid = s.relid"
			  . " JOIN replicant.pipelines p ON p.id = s.pipeline_id"
			  . " WHERE p.name = 'coldrop' AND s.relid = 'cd_t'::regclass", 10),
		"$label: the accepted shape is saved");
	drop_pipeline($label, 'coldrop');
}

# ---- a column dropped before the table's first streamed change --------------------
# create_pipeline saves every published table's shape, so a worker that has
# never delivered the table still compares it with the shape it started from.
{
	my $label = 'column dropped before the first change';
	$node->safe_psql('postgres', q{
CREATE TABLE fc_t (id int PRIMARY KEY, a text, b text);
CREATE PUBLICATION fc_pub FOR TABLE fc_t;
});
	create_pipeline('firstchg', 'fc_pub');
	$node->safe_psql('postgres', 'ALTER TABLE fc_t DROP COLUMN a');
	$node->safe_psql('postgres', "INSERT INTO fc_t VALUES (1, '$MARK b1')");
	expect_halt($label, 'firstchg', qr/^column "a" of table "fc_t" was dropped or renamed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	is(sink_row('public.fc_t', 1), '', "$label: the change after the drop was not delivered");
	drop_pipeline($label, 'firstchg');
}

# ---- replica identity changed -----------------------------------------------------
# Widening to FULL with the same key (the primary key) only adds the old row:
# nothing halts (create_pipeline's TOAST warning asks for exactly that).
# Narrowing back, or a FULL that changes the key, halts.
{
	my $label = 'replica identity changed';
	$node->safe_psql('postgres', q{
CREATE TABLE ri_t (id int PRIMARY KEY, v text);
CREATE TABLE ri_u (id int PRIMARY KEY, email text NOT NULL UNIQUE, v text);
ALTER TABLE ri_u REPLICA IDENTITY USING INDEX ri_u_email_key;
CREATE PUBLICATION ri_pub FOR TABLE ri_t, ri_u;
});
	create_pipeline('ident', 'ri_pub');
	$node->safe_psql('postgres', "INSERT INTO ri_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.ri_t', 1), '', "$label: delivered before");

	$node->safe_psql('postgres', 'ALTER TABLE ri_t REPLICA IDENTITY FULL');
	$node->safe_psql('postgres', "UPDATE ri_t SET v = '$MARK 1w' WHERE id = 1");
	like(wait_sink_match('public.ri_t', 1, qr/\Q$MARK\E 1w/), qr/\Q$MARK\E 1w/,
		"replica_identity_widened_no_halt: $label: DEFAULT -> FULL (same key): the update arrives");
	is(status('ident')->{state}, 'streaming', "$label: DEFAULT -> FULL: nothing halts");

	$node->safe_psql('postgres', 'ALTER TABLE ri_t REPLICA IDENTITY DEFAULT');
	$node->safe_psql('postgres', "UPDATE ri_t SET v = '$MARK 1b' WHERE id = 1");
	expect_halt($label, 'ident', qr/^the replica identity of table "ri_t" changed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	$node->safe_psql('postgres', "INSERT INTO ri_t VALUES (2, '$MARK 2')");
	halted_across_restart($label, 'ident', qr/^the replica identity of table "ri_t" changed; replicant\.resume_pipeline\(\) accepts the new shape$/);

	resume('ident');
	expect_streaming($label, 'ident');
	$node->safe_psql('postgres', "INSERT INTO ri_t VALUES (3, '$MARK 3')");
	like(wait_sink_match('public.ri_t', 1, qr/\Q$MARK\E 1b/), qr/\Q$MARK\E 1b/, "$label: the update that halted arrives");
	isnt(wait_sink_row('public.ri_t', 2), '', "$label: the insert made while halted arrives");
	isnt(wait_sink_row('public.ri_t', 3), '', "$label: and a later one");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['ri_t'], 30),
		"$label: the sink equals the source");

	# USING INDEX (email) -> FULL keys by the primary key instead: a halt.
	$node->safe_psql('postgres', "INSERT INTO ri_u VALUES (1, 'a\@example.com', '$MARK u1')");
	isnt(wait_sink_row('public.ri_u', 1), '', "$label: USING INDEX: delivered before");
	$node->safe_psql('postgres', 'ALTER TABLE ri_u REPLICA IDENTITY FULL');
	$node->safe_psql('postgres', "UPDATE ri_u SET v = '$MARK u1b' WHERE id = 1");
	expect_halt("$label (key changed)", 'ident',
		qr/^the replica identity of table "ri_u" changed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	drop_pipeline($label, 'ident');
}

# ---- the owner's privileges: SELECT revoked, row-level security enabled -----------
$node->safe_psql('postgres', q{
CREATE ROLE pipeowner LOGIN;
GRANT USAGE ON SCHEMA replicant TO pipeowner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO pipeowner;
CREATE TABLE own_t (id int PRIMARY KEY, v text);
CREATE TABLE rls_t (id int PRIMARY KEY, v text);
GRANT SELECT ON own_t, rls_t TO pipeowner;
CREATE PUBLICATION own_pub FOR TABLE own_t;
CREATE PUBLICATION rls_pub FOR TABLE rls_t;
});
{
	my $label = 'SELECT revoked';
	create_pipeline('owned', 'own_pub', role => 'pipeowner');
	is($node->safe_psql('postgres',
			"SELECT pg_get_userbyid(owner) FROM replicant.pipelines WHERE name = 'owned'"),
		'pipeowner', "$label: the pipeline is owned by the non-superuser role");
	$node->safe_psql('postgres', "INSERT INTO own_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.own_t', 1), '', "$label: delivered before");

	$node->safe_psql('postgres', 'REVOKE SELECT ON own_t FROM pipeowner');
	$node->safe_psql('postgres', "INSERT INTO own_t VALUES (2, '$MARK 2')");
	expect_halt($label, 'owned',
		qr/^pipeline owner has no SELECT privilege on table "own_t"$/);
	is(sink_row('public.own_t', 2), '', "$label: the row the owner may not read was not delivered");
	halted_across_restart($label, 'owned', qr/^pipeline owner has no SELECT privilege on table "own_t"$/);

	$node->safe_psql('postgres', 'GRANT SELECT ON own_t TO pipeowner');
	$node->safe_psql('postgres', "INSERT INTO own_t VALUES (3, '$MARK 3')");
	resume('owned');
	expect_streaming($label, 'owned');
	isnt(wait_sink_row('public.own_t', 3), '', "$label: a change made after the GRANT arrives");
	$node->safe_psql('postgres', "INSERT INTO own_t VALUES (4, '$MARK 4')");
	isnt(wait_sink_row('public.own_t', 4), '', "$label: and so does a later one");
	resumes_needed($label, 'owned', 2);
	drop_pipeline($label, 'owned');
}
{
	my $label = 'row-level security';
	create_pipeline('rls', 'rls_pub', role => 'pipeowner');
	$node->safe_psql('postgres', "INSERT INTO rls_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.rls_t', 1), '', "$label: delivered before");
	$node->safe_psql('postgres', 'ALTER TABLE rls_t ENABLE ROW LEVEL SECURITY');
	$node->safe_psql('postgres', "INSERT INTO rls_t VALUES (2, '$MARK 2')");
	expect_halt($label, 'rls',
		qr/^table "rls_t" has row-level security that the pipeline owner does not bypass$/);
	$node->safe_psql('postgres', 'ALTER TABLE rls_t DISABLE ROW LEVEL SECURITY');
	$node->safe_psql('postgres', "INSERT INTO rls_t VALUES (3, '$MARK 3')");
	resume('rls');
	expect_streaming($label, 'rls');
	isnt(wait_sink_row('public.rls_t', 3), '', "$label: a change made after RLS was disabled arrives");
	drop_pipeline($label, 'rls');
}

# ---- a resume accepts exactly the cause of the halt it resumes -------------------
# The sink rejects a batch and the pipeline halts; while it is halted, one
# of its two publications is dropped and created again, and a table of the
# other loses a column.  Resuming the sink's halt accepts neither: each
# halts the pipeline in turn, naming it, and only resuming that halt
# accepts it, for what committed up to the resume.  A publication a resume
# accepted as missing is empty there: only its own table's changes of that
# time are not delivered; the other publication's all arrive.
{
	my $label = 'resume accepts its halt only';
	my $ws = ReplicantTest::start_sink(name => 'waiver');
	$node->safe_psql('postgres', q{
CREATE TABLE wa_t (id int PRIMARY KEY, v text);
CREATE TABLE wb_t (id int PRIMARY KEY, v text);
CREATE TABLE wc_t (id int PRIMARY KEY, v text, x text);
CREATE PUBLICATION wa_pub FOR TABLE wa_t, wc_t;
CREATE PUBLICATION wb_pub FOR TABLE wb_t;
});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('waiver', ARRAY['wa_pub', 'wb_pub'], '$ws->{url}',"
		  . " http_timeout_ms => 2000, connect_timeout_ms => 500)");
	$node->safe_psql('postgres', qq{
INSERT INTO wa_t VALUES (1, '$MARK a1');
INSERT INTO wb_t VALUES (1, '$MARK b1');
INSERT INTO wc_t VALUES (1, '$MARK c1', '$MARK x1');
});
	my $ids = sub {
		my ($t) = @_;
		return join(',', sort { $a <=> $b } map { /"id":(\d+)/ ? $1 : () } split /\n/, $ws->dump("public.$t"));
	};
	ok(poll("SELECT replicant.await_delivered('waiver', pg_current_wal_lsn(), 30000)", 60),
		"$label: delivered before");

	$ws->control({ fail_status => 400 });
	$node->safe_psql('postgres', "INSERT INTO wa_t VALUES (2, '$MARK a2')");
	expect_halt($label, 'waiver', qr/^sink rejected batch: HTTP 400/);
	$node->safe_psql('postgres', qq{
DROP PUBLICATION wb_pub;
INSERT INTO wa_t VALUES (3, '$MARK a3');
INSERT INTO wb_t VALUES (2, '$MARK b2');
CREATE PUBLICATION wb_pub FOR TABLE wb_t;
ALTER TABLE wc_t DROP COLUMN x;
INSERT INTO wc_t VALUES (2, '$MARK c2');
INSERT INTO wa_t VALUES (4, '$MARK a4');
INSERT INTO wb_t VALUES (3, '$MARK b3');
});
	$ws->control({ clear => JSON::PP::true });

	# (A halt discards the batch decoded before it: what arrived before a
	# halt is at most what committed before the change that halted.)
	resume('waiver');
	expect_halt("$label, the sink's halt resumed", 'waiver', qr/^publication "wb_pub" does not exist$/);
	like($ids->('wa_t'), qr/^1(,2)?$/, "$label: nothing committed after the drop arrives");

	resume('waiver');
	expect_halt("$label, the missing publication accepted", 'waiver',
		qr/^column "x" of table "wc_t" was dropped or renamed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	like($ids->('wa_t'), qr/^1(,2(,3)?)?$/, "$label: nothing committed after the column's drop arrives");
	is($ids->('wb_t'), '1', "$label: nor the missing publication's own row of the time it was missing");

	resume('waiver');
	expect_streaming("$label, the new shape accepted", 'waiver');
	ok(poll("SELECT replicant.await_delivered('waiver', pg_current_wal_lsn(), 30000)", 60),
		"$label: delivered up to now");
	is($ids->('wa_t'), '1,2,3,4', "$label: wa_t: every row");
	is($ids->('wb_t'), '1,3', "$label: wb_t: all but the row committed while its publication was missing");
	is($ids->('wc_t'), '1,2', "$label: wc_t: every row, the one after the drop in the new shape");

	# What a resume accepted ends where it was called.
	$node->safe_psql('postgres', qq{
DROP PUBLICATION wb_pub;
INSERT INTO wa_t VALUES (5, '$MARK a5');
});
	expect_halt("$label, dropped again after the resume", 'waiver', qr/^publication "wb_pub" does not exist$/);
	is($ids->('wa_t'), '1,2,3,4', "$label: nothing committed after it was dropped again arrives");
	$node->safe_psql('postgres', 'CREATE PUBLICATION wb_pub FOR TABLE wb_t');
	resume('waiver');
	expect_streaming("$label, resumed again", 'waiver');
	ok(poll("SELECT replicant.await_delivered('waiver', pg_current_wal_lsn(), 30000)", 60),
		"$label: delivered up to now, again");
	is($ids->('wa_t'), '1,2,3,4,5', "$label: wa_t's row of that time arrives");
	drop_pipeline($label, 'waiver');
	$ws->stop;
}

# ---- a resume accepts the shape its halt named, no other ---------------------------
# The halt on a dropped column names the shape the table changed to; while
# the pipeline is halted, the replica identity changes too (the key becomes
# another column).  Resuming the column's halt accepts that shape only: the
# key's change halts again (a delete keyed by the new key would leave the
# row at the sink), and only its own resume accepts it.
{
	my $label = 'resume accepts the shape it named';
	$node->safe_psql('postgres', q{
CREATE TABLE sh_t (id int PRIMARY KEY, a text, c int NOT NULL, v text);
CREATE UNIQUE INDEX sh_t_c ON sh_t (c);
CREATE PUBLICATION sh_pub FOR TABLE sh_t;
});
	create_pipeline('shape', 'sh_pub');
	$node->safe_psql('postgres', "INSERT INTO sh_t VALUES (1, '$MARK a1', 1, '$MARK 1')");
	isnt(wait_sink_row('public.sh_t', 1), '', "$label: delivered before");
	$node->safe_psql('postgres', qq{
ALTER TABLE sh_t DROP COLUMN a;
INSERT INTO sh_t VALUES (2, 2, '$MARK 2');
});
	expect_halt($label, 'shape',
		qr/^column "a" of table "sh_t" was dropped or renamed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	# A collision-resistant digest: no second shape can be made to match.
	like($node->safe_psql('postgres', "SELECT halt_cause FROM replicant.pipelines WHERE name = 'shape'"),
		qr/^schema:\d+:[0-9a-f]{64}$/, "shape_cause_sha256: $label: the halt's cause names the shape by its SHA-256");
	$node->safe_psql('postgres', qq{
ALTER TABLE sh_t REPLICA IDENTITY USING INDEX sh_t_c;
INSERT INTO sh_t VALUES (3, 3, '$MARK 3');
});
	resume('shape');
	expect_halt("$label, the column's halt resumed", 'shape',
		qr/^the replica identity of table "sh_t" changed; replicant\.resume_pipeline\(\) accepts the new shape$/);
	is(sink_row('public.sh_t', 3), '', "$label: nothing committed after the key changed arrives");
	resume('shape');
	expect_streaming("$label, the new key accepted", 'shape');
	isnt(wait_sink_row('public.sh_t', 2), '', "$label: the row in the shape the first resume accepted arrives");
	isnt(wait_sink_row('public.sh_t', 3), '', "$label: the row after the key changed arrives");
	drop_pipeline($label, 'shape');
}

# ---- the slot moved by something else -------------------------------------------
# A role with REPLICATION can pg_replication_slot_advance() a stopped
# pipeline's slot (fast-forwarding never loads the output plugin, so the
# plugin cannot refuse).  The worker records how far it confirms the slot,
# before it confirms; one that finds the slot beyond that halts, saying
# changes may be lost, instead of skipping them silently, and
# resume_pipeline accepts the gap.  The slot the worker moved on by itself
# over writes to unpublished tables, and a crash, never halt it.
{
	my $label = 'slot moved';
	$node->safe_psql('postgres', q{
CREATE TABLE mv_t (id int PRIMARY KEY, v text);
CREATE TABLE mv_other (id int, v text);
CREATE PUBLICATION mv_pub FOR TABLE mv_t;
CREATE ROLE advancer LOGIN REPLICATION;
});
	create_pipeline('moved', 'mv_pub');
	my $slot = ReplicantTest::slot_name($node, 'postgres', 'moved');
	$node->safe_psql('postgres', "INSERT INTO mv_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.mv_t', 1), '', "$label: delivered before");

	# The worker moves its slot on over WAL that delivers nothing.
	my $quiet = $node->safe_psql('postgres',
		"INSERT INTO mv_other SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g;"
		  . ' SELECT pg_current_wal_lsn()');
	ok(poll("SELECT confirmed_flush_lsn >= '$quiet' FROM pg_replication_slots WHERE slot_name = '$slot'", 30),
		"$label: the worker moves its slot past writes to an unpublished table");
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('moved')");
	ok(poll("SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$slot'"),
		"$label: the disabled pipeline lets go of its slot");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('moved')");
	$node->safe_psql('postgres', "INSERT INTO mv_t VALUES (2, '$MARK 2')");
	isnt(wait_sink_row('public.mv_t', 2), '', "$label: a slot the worker moved itself does not halt it");
	$node->safe_psql('postgres',
		"INSERT INTO mv_other SELECT g, repeat('y', 200) FROM generate_series(1, 2000) g");
	$node->stop('immediate');
	$node->start;
	$node->safe_psql('postgres', "INSERT INTO mv_t VALUES (3, '$MARK 3')");
	isnt(wait_sink_row('public.mv_t', 3), '', "$label: nor after a crash");
	is(status('moved')->{state}, 'streaming', "$label: streaming after the crash");

	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('moved')");
	ok(poll("SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$slot'"),
		"$label: disabled again");
	$node->safe_psql('postgres', "INSERT INTO mv_t VALUES (4, '$MARK 4')");
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET ROLE advancer; SELECT pg_replication_slot_advance('$slot', pg_current_wal_lsn())");
	is($ret, 0, "$label: a REPLICATION role advances the stopped pipeline's slot") or diag($err);
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('moved')");
	expect_halt($label, 'moved',
		qr/^replication slot "\Q$slot\E" was moved from [0-9A-F]+\/[0-9A-F]+ to [0-9A-F]+\/[0-9A-F]+ by something other than this pipeline \(such as pg_replication_slot_advance\(\)\): changes committed in between may be lost; replicant\.resume_pipeline\(\) accepts the gap$/);
	is(sink_row('public.mv_t', 4), '', "$label: the row the advance skipped was not delivered");
	resume('moved');
	expect_streaming("$label, the gap accepted", 'moved');
	$node->safe_psql('postgres', "INSERT INTO mv_t VALUES (5, '$MARK 5')");
	isnt(wait_sink_row('public.mv_t', 5), '', "$label: a later change arrives");
	is(sink_row('public.mv_t', 4), '', "$label: the skipped row stays lost, as accepted");
	drop_pipeline($label, 'moved');
}

# ---- a row that cannot be encoded ---------------------------------------------------
# Every value of a UTF-8 (or convertible) database encodes; user-defined
# types with a failing output function need C.  An SQL_ASCII database,
# though, stores any bytes, and the sink gets UTF-8: a value that is not
# valid UTF-8 cannot be encoded.
{
	my $label = 'row that cannot be encoded';
	$node->safe_psql('postgres',
		"CREATE DATABASE asciidb ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql('asciidb', q{
CREATE EXTENSION replicant;
CREATE TABLE enc_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION enc_pub FOR TABLE enc_t;
});
	create_pipeline('enc', 'enc_pub', db => 'asciidb');
	$node->safe_psql('asciidb', "INSERT INTO enc_t VALUES (1, '$MARK 1')");
	isnt(wait_sink_row('public.enc_t', 1), '', "$label: a valid row is delivered");

	my $log_offset = -s $node->logfile;
	$node->safe_psql('asciidb', "INSERT INTO enc_t VALUES (2, E'$MARK \\xff\\xfe 2')");
	is($node->safe_psql('asciidb', "SELECT octet_length(v) FROM enc_t WHERE id = 2"),
		length($MARK) + 5, "$label: the row holds two bytes that are not UTF-8");
	if (expect_halt($label, 'enc', qr/encode/, 'asciidb'))
	{
		halted_across_restart($label, 'enc', qr/encode/, 'asciidb');
	}
	else
	{
		my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset);
		my @errors = grep { /ERROR|exited with exit code/ } split /\n/, $log;
		diag(sprintf("$label: %d ERROR/exit lines in the server log since, e.g.:\n%s",
				scalar(@errors), join("\n", @errors[ 0 .. ($#errors < 3 ? $#errors : 3) ])));
	}
	is(sink_row('public.enc_t', 2), '', "$label: the row was not delivered");
	# Nothing makes the row encodable: the fix is a new pipeline.
	drop_pipeline($label, 'enc', 'asciidb');
	create_pipeline('enc', 'enc_pub', db => 'asciidb');
	$node->safe_psql('asciidb', "INSERT INTO enc_t VALUES (3, '$MARK 3')");
	isnt(wait_sink_row('public.enc_t', 3), '', "$label: the new pipeline delivers later rows");
	drop_pipeline("$label, recreated", 'enc', 'asciidb');
}

# ---- drop_pipeline: of a halted pipeline, and in the middle of a POST ---------------
{
	my $label = 'drop while halted';
	my $rejecting = ReplicantTest::start_sink(name => 'rejecting', fail_status => 400);
	$node->safe_psql('postgres', q{
CREATE TABLE drop_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION drop_pub FOR TABLE drop_t;
});
	create_pipeline('halted', 'drop_pub', url => $rejecting->{url});
	$node->safe_psql('postgres', "INSERT INTO drop_t VALUES (1, '$MARK 1')");
	expect_halt($label, 'halted', qr/^sink rejected batch: HTTP 400 \(commit LSN [0-9A-F]+\/[0-9A-F]+\)$/);
	is(slot_count('halted'), '1', "$label: the halted pipeline keeps its slot");
	drop_pipeline($label, 'halted');
	$rejecting->stop;

	$label = 'drop during a POST';
	# The sink answers a minute late: drop_pipeline must not wait for it.
	my $answer_s = 60;
	my $slow = ReplicantTest::start_sink(name => 'slow', delay_ms => $answer_s * 1000);
	create_pipeline('busy', 'drop_pub', url => $slow->{url}, http_timeout_ms => 2 * $answer_s * 1000);
	$node->safe_psql('postgres', "INSERT INTO drop_t VALUES (2, '$MARK 2')");
	# The sink counts a request once it applied it, then waits to answer.
	my $deadline = time() + 30;
	usleep(50_000) until $slow->stats->{requests} > 0 || time() > $deadline;
	is($slow->stats->{requests}, 1, "$label: a request is in flight");
	is(workers_running('busy'), '1', "$label: the worker waits for the answer");
	is(status('busy')->{state}, 'streaming', "$label: no attempt has failed yet");
	my $t0 = time();
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('busy')");
	my $took = time() - $t0;
	cmp_ok($took, '<', $answer_s,
		sprintf("$label: drop_pipeline returned before the sink answered (%.1f s)", $took));
	is(slot_count('busy'), '0', "$label: drop_pipeline leaves no slot");
	ok(poll("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline busy'", 10),
		"$label: and no worker");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM replicant.pipelines WHERE name = 'busy'"),
		'0', "$label: nor its row");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM replicant.checkpoints'),
		'0', "$label: nor any checkpoint row");
	sleep 2;
	is(workers_running('busy'), '0', "$label: nothing restarts the worker");
	$slow->stop;
}

# ---- nothing left behind, nothing leaked ---------------------------------------------
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'replicant%'"),
	'0', 'no replicant slot remains');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"),
	'0', 'no pipeline worker runs');
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
my @leaks = grep { /\Q$MARK\E/ } split /\n/, $log;
is(scalar(@leaks), 0, 'no server log line shows a row value')
  or diag(join("\n", @leaks[ 0 .. ($#leaks < 4 ? $#leaks : 4) ]));

note(sprintf('%.0f s', time() - $started));
done_testing();
