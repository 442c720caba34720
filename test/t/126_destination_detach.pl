# A destination whose sink keeps failing does not hold the others (issue
# #34 item 3, docs/destinations-design.md §3.3).  While its sink answers
# 503 the other destination streams on and the batches are kept for it;
# once they pass replicant.destination_backlog it is left behind (detached:
# its checkpoint holds the slot, one request is retried as the probe), and
# when its sink answers again the worker starts over from its checkpoint (a
# rewind): it gets everything, the other nothing twice.  A message, which
# must follow every batch before it, leaves a retrying destination behind
# at once; a killed worker while one is left behind loses nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('dest_detach',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}', batch_max_transactions => 10, messages => true)");
$node->safe_psql('postgres', "SELECT replicant.add_destination('p', 'b', '$sink_b->{url}', batch_max_transactions => 10)");

sub poll { return ReplicantTest::poll($node, @_); }

my $n = 0;
# $count transactions of one row each, $pad bytes of value.
sub insert
{
	my ($count, $pad) = @_;
	my $sql = '';
	for (1 .. $count)
	{
		$n++;
		$sql .= "INSERT INTO t VALUES ($n, repeat('v', " . ($pad // 10) . "));\n";
	}
	$node->safe_psql('postgres', $sql);
}

sub ids_in
{
	my ($sink) = @_;
	return join(',', sort { $a <=> $b } map { /"id":\s*(\d+)/ ? $1 : () } split /\n/, $sink->dump('public.t'));
}

# Polls until the sink holds ids $from (default 1) .. $n.
sub has_all
{
	my ($sink, $from) = @_;
	my $want = join(',', ($from // 1) .. $n);
	for (1 .. 600)
	{
		return 1 if ids_in($sink) eq $want;
		select(undef, undef, undef, 0.2);
	}
	diag("$sink->{name} has " . ids_in($sink));
	return 0;
}

sub applied_once
{
	my ($sink) = @_;
	my %lsns;
	$lsns{ $_->{commit_lsn} }++ for @{ $sink->txlog };
	return scalar(grep { $_ > 1 } values %lsns) == 0;
}

sub state_of
{
	my ($d) = @_;
	return $node->safe_psql('postgres',
		"SELECT state FROM replicant.destination_status WHERE pipeline = 'p' AND destination = '$d'");
}

sub metric
{
	my ($name, $d) = @_;
	return $node->safe_psql('postgres',
		"SELECT value FROM replicant.metrics WHERE pipeline = 'p' AND metric = '$name' AND destination = '$d'");
}

sub worker_starts
{
	return $node->safe_psql('postgres',
		"SELECT value FROM replicant.metrics WHERE pipeline = 'p' AND metric = 'replicant_worker_starts_total'");
}

insert(5);
ok(has_all($sink_a) && has_all($sink_b), 'both destinations stream');

# 1. b's sink fails for a while, within the backlog: a streams on, b's
# batches wait for it, and it catches up in the same run once its sink
# answers.
my $starts = worker_starts();
$sink_b->control({ fail_status => 503 });
insert(40);
ok(has_all($sink_a), 'a gets every transaction while b retries');
ok(poll("SELECT state = 'retrying' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'b'", 60),
	'b is retrying');
is(state_of('default'), 'streaming', 'a is streaming');
$sink_b->control({ clear => 1 });
ok(has_all($sink_b), 'b catches up once its sink answers');
is(worker_starts(), $starts, 'within the backlog, without a restart');
is(metric('replicant_rewinds_total', 'b'), '0', 'and without a rewind');

# 2. Past the backlog: b is left behind, a streams on; b's sink answers
# again, the worker rewinds, b gets everything and a nothing twice.
$node->append_conf('postgresql.conf', 'replicant.destination_backlog = 64kB');
$node->reload;
my $offset = -s $node->logfile;
$sink_b->control({ fail_status => 503 });
insert(300, 500);
ok(has_all($sink_a), 'a gets every transaction while b is left behind');
$node->wait_for_log(qr/event=detached pipeline=p destination=b /, $offset);
ok(1, 'b was left behind (logged)');
is(state_of('b'), 'retrying', 'b is retrying its probe');
my $b_checkpoint = $node->safe_psql('postgres',
	"SELECT c.end_lsn FROM replicant.checkpoints c JOIN replicant.destinations d ON d.id = c.destination_id WHERE d.name = 'b'");
my $slot = ReplicantTest::slot_name($node, 'postgres', 'p');
is($node->safe_psql('postgres',
	"SELECT confirmed_flush_lsn <= '$b_checkpoint' FROM pg_replication_slots WHERE slot_name = '$slot'"),
	't', "b's checkpoint holds the slot");
my $a_dups = $sink_a->stats->{duplicate_transactions};
$sink_b->control({ clear => 1 });
ok(has_all($sink_b), 'b catches up after its sink answers');
ok(poll("SELECT value = 1 FROM replicant.metrics WHERE pipeline = 'p' AND metric = 'replicant_rewinds_total' AND destination = 'b'", 60),
	'one rewind counted for b');
is(metric('replicant_rewinds_total', 'default'), '0', 'none for a');
ok(worker_starts() > $starts, 'the worker started again to catch b up');
$node->wait_for_log(qr/event=behind pipeline=p destination=b/, $offset);
$node->wait_for_log(qr/event=rejoined pipeline=p destination=b /, $offset);
my $log = substr(PostgreSQL::Test::Utils::slurp_file($node->logfile), $offset);
my ($left_at) = $log =~ /event=detached pipeline=p destination=b checkpoint=(\S+)/;
my ($rejoined_from) = $log =~ /event=rejoined pipeline=p destination=b from=(\S+)/;
is($node->safe_psql('postgres', "SELECT '$rejoined_from'::pg_lsn > '$left_at'::pg_lsn"), 't',
	'the probe taken moved b past the request it retried: the rewind starts after it');
insert(5);
ok(has_all($sink_a) && has_all($sink_b), 'both stream after the rewind');
is($sink_a->stats->{duplicate_transactions}, $a_dups, 'a was sent nothing twice by the rewind');
ok(applied_once($sink_a) && applied_once($sink_b), 'no commit applied twice by either');
ok(poll("SELECT bool_and(state = 'streaming') FROM replicant.destination_status WHERE pipeline = 'p'", 60),
	'both are streaming');

# 3. A message must follow every batch before it: b, retrying, is left
# behind at once (the backlog is large again), a gets it, and b gets it
# once after the rewind.
$node->append_conf('postgresql.conf', 'replicant.destination_backlog = 64MB');
$node->reload;
$offset = -s $node->logfile;
$sink_b->control({ fail_status => 503 });
insert(3);
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'note', 'after the inserts')");
my $after_message = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
insert(3);
ok(has_all($sink_a), 'a gets the transactions around the message');
$node->wait_for_log(qr/event=detached pipeline=p destination=b /, $offset);
ok(1, 'b was left behind for the message');
sub notes { return scalar grep { $_->{prefix} eq 'note' } @{ $_[0]->messages }; }
is(notes($sink_a), 1, 'a got the message, before the transactions after it');
is(notes($sink_b), 0, 'b, left behind, did not');

# 4. The worker killed while b is left behind: nothing lost.  Killed once
# a's checkpoint is past the message: before it, sending it again would be
# the one batch a crash may repeat, not a rewind's doing.
ok(poll("SELECT checkpoint_lsn > '$after_message' FROM replicant.destination_status"
		  . " WHERE pipeline = 'p' AND destination = 'default'", 60),
	"a's checkpoint is past the message");
# The worker commits its checkpoints asynchronously: a commit of our own
# flushes the WAL past a's before the kill.
$node->safe_psql('postgres', 'SELECT pg_current_xact_id()');
my $worker = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ReplicantTest::kill_worker($node, $worker);
insert(10);
ok(has_all($sink_a), 'a has everything after the crash');
$sink_b->control({ clear => 1 });
ok(has_all($sink_b), 'b has everything after the crash and its sink\'s recovery');
is(notes($sink_b), 1, 'b got the message once');
is(notes($sink_a), 1, 'a got it once');
ok(applied_once($sink_a) && applied_once($sink_b), 'no commit applied twice by either');

# 5. b behind while c, attached, waits to retry within the backlog: b is
# caught up without waiting for c's sink (review of 557662a, finding 3).
my $sink_c = ReplicantTest::start_sink(name => 'sink_c');
$node->safe_psql('postgres', "SELECT replicant.add_destination('p', 'c', '$sink_c->{url}', batch_max_transactions => 10)");
my $c_from = $n;
insert(2);
ok(has_all($sink_a) && has_all($sink_b), 'a and b stream after c was added');
ok(poll("SELECT bool_and(state = 'streaming') FROM replicant.destination_status WHERE pipeline = 'p'", 60),
	'all three are streaming');
my $rewinds = metric('replicant_rewinds_total', 'b');
$offset = -s $node->logfile;
$sink_b->control({ fail_status => 503 });
insert(2);
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'note', 'second')");
$node->wait_for_log(qr/event=detached pipeline=p destination=b /, $offset);
$sink_c->control({ fail_status => 503 });
insert(2);
ok(poll("SELECT state = 'retrying' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'c'", 60),
	'c retries');
$sink_b->control({ clear => 1 });
ok(has_all($sink_b), 'b catches up while c still fails');
ok(poll("SELECT value = $rewinds + 1 FROM replicant.metrics WHERE pipeline = 'p' AND metric = 'replicant_rewinds_total' AND destination = 'b'", 60),
	'by a rewind');
is(state_of('c'), 'retrying', 'c still retrying');
$sink_c->control({ clear => 1 });
ok(has_all($sink_c, $c_from + 1), 'c catches up with everything after its add');
ok(poll("SELECT bool_and(state = 'streaming') FROM replicant.destination_status WHERE pipeline = 'p'", 60),
	'all three stream again');
ok(applied_once($sink_a) && applied_once($sink_b) && applied_once($sink_c), 'no commit applied twice by any');

# 6. A message does not leave behind a destination it does not go to (a
# ClickHouse-format one, whose format has no messages) while it retries
# (review of 4611cbb, finding 2).
my $sink_d = ReplicantTest::start_sink(name => 'sink_d', fail_status => 503);
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'd', '$sink_d->{url}', format => 'clickhouse')");
insert(2);
ok(poll("SELECT state = 'retrying' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'd'", 60),
	'd retries');
$offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'note', 'third')");
insert(2);
ok(has_all($sink_a), 'a streams past the message');
is(notes($sink_a), 3, 'a got the message (its third)');
unlike(substr(PostgreSQL::Test::Utils::slurp_file($node->logfile), $offset), qr/event=detached pipeline=p destination=d /,
	'd was not left behind for a message it does not get');
is(state_of('d'), 'retrying', 'd still retries, attached');

done_testing();
