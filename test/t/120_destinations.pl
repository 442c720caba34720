# Several destinations on one pipeline (issue #34): one worker decodes once
# and sends to each.  A destination added while the pipeline streams gets
# exactly the transactions that commit after the call; a sink's 400 halts
# its destination alone while the others stream on, and resuming it catches
# it up from its own checkpoint with nothing sent twice to the others; a
# killed worker re-sends at most one batch per destination; a destination
# dropped while streaming lets the slot move on.
# versions: all (issue #34 asks its tests on 15, 17 and 18)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use List::Util qw(max min);
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('destinations',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');
my $sink_c = ReplicantTest::start_sink(name => 'sink_c');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $sink_a->{url} . "', batch_max_transactions => 20)");

sub poll { return ReplicantTest::poll($node, @_); }

my $n = 0;
# $count transactions of one row each.
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

sub delivered
{
	return poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120);
}

sub ids_in
{
	my ($sink) = @_;
	my @ids = map { /"id":\s*(\d+)/ ? $1 : () } split /\n/, $sink->dump('public.t');
	return [ sort { $a <=> $b } @ids ];
}

# No commit_lsn applied twice by a sink.
sub applied_once
{
	my ($sink) = @_;
	my %lsns;
	$lsns{ $_->{commit_lsn} }++ for @{ $sink->txlog };
	return scalar(grep { $_ > 1 } values %lsns) == 0;
}

# Polls until the sink holds exactly the ids expected (rows delivered before
# the column added below have no value for it: ids are what to compare).
sub has_ids
{
	my ($sink, $expected) = @_;
	my $want = join(',', @$expected);
	for (1 .. 600)
	{
		return 1 if join(',', @{ ids_in($sink) }) eq $want;
		usleep(200_000);
	}
	diag('ids: ' . join(',', @{ ids_in($sink) }));
	return 0;
}

sub dest_state
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT state FROM replicant.destination_status WHERE pipeline = 'p' AND destination = '$name'");
}

insert(30);
ok(delivered(), 'the first destination streams');

# 1. A destination added while the pipeline streams: a writer commits
# before, during and after the call; b gets a suffix of the ids with no gap,
# and everything committed after the call.
my $writer = $node->background_psql('postgres');
$writer->query_safe('BEGIN');
$writer->query_safe("INSERT INTO t VALUES (100000, 'open during the add')");
insert(10);
my $before = $n;
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'b', '" . $sink_b->{url} . "', batch_max_transactions => 7)");
$writer->query_safe('COMMIT');
$writer->quit;
insert(40);
ok(delivered(), 'both destinations delivered after the add');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, ['t'], 120), 'a equals the source');
my $b_ids = ids_in($sink_b);
is_deeply($b_ids, [ ($before + 1 .. $n), 100000 ],
	'b got exactly what committed after add_destination (the open transaction committed after it)');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM replicant.destination_status WHERE pipeline = 'p' AND state = 'streaming'"),
	'2', 'destination_status: two destinations streaming');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.status WHERE pipeline = 'p'"),
	'1', 'status: one row for the pipeline');
my $ids_b = join(' ', map { $_->{webhook_id} } @{ $sink_b->stats->{accepted} });
like($ids_b, qr/^(p\.b-\S+\s*)+$/, 'b\'s webhook-ids are <pipeline>.<destination>-...');
unlike(join(' ', map { $_->{webhook_id} } @{ $sink_a->stats->{accepted} }), qr/p\.b/,
	'the default destination keeps the pipeline\'s ids');

# 2. b's sink refuses a batch: b halts alone, a streams on.
$sink_b->control({ clear => 1, fail_status => 400 });
insert(5);
ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'b'", 120),
	'a 400 halts b');
like($node->safe_psql('postgres',
	"SELECT halt_reason FROM replicant.destinations WHERE name = 'b'"),
	qr/^sink rejected batch: HTTP 400/, 'the halt is recorded on the destination');
# A column added while b is halted: resuming b decodes again from before
# it, and the older commits' shape is no schema change (review rv-dest7).
$node->safe_psql('postgres', 'ALTER TABLE t ADD COLUMN w int');
insert(25);
ok(has_ids($sink_a, [ 1 .. $n, 100000 ]), 'a streams on while b is halted');
is(dest_state('default'), 'streaming', 'a (the default destination) is streaming');
my $worker = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ok($worker ne '', 'the worker runs');
my $slot_lsn = $node->safe_psql('postgres',
	"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '"
	  . ReplicantTest::slot_name($node, 'postgres', 'p') . "'");
my $b_checkpoint = $node->safe_psql('postgres',
	"SELECT c.end_lsn FROM replicant.checkpoints c JOIN replicant.destinations d ON d.id = c.destination_id WHERE d.name = 'b'");
ok($node->safe_psql('postgres', "SELECT '$slot_lsn'::pg_lsn <= '$b_checkpoint'::pg_lsn") eq 't',
	'the halted destination holds the slot at its checkpoint');

# Resumed: b catches up from its checkpoint; a gets nothing twice.
$sink_b->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('p', 'b')");
ok(poll("SELECT state = 'streaming' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'b'", 120),
	'b streams again');
is($node->safe_psql('postgres', "SELECT coalesce(halt_reason, 'none') FROM replicant.pipelines WHERE name = 'p'"),
	'none', 'the pipeline did not halt on the column added before the resume');
insert(10);
ok(delivered(), 'delivered after the resume');
is_deeply(ids_in($sink_b), [ ($before + 1 .. $n), 100000 ], 'b caught up with everything after its add');
ok(has_ids($sink_a, [ 1 .. $n, 100000 ]), 'a equals the source');
ok(applied_once($sink_a), 'a applied no commit twice across the rewind');
ok(applied_once($sink_b), 'b applied no commit twice');

# 3. A killed worker: each destination equal, at most one batch re-sent each.
insert(50);
$worker = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ReplicantTest::kill_worker($node, $worker);
insert(50);
ok(delivered(), 'delivered after the crash');
ok(has_ids($sink_a, [ 1 .. $n, 100000 ]), 'a equals the source after the crash');
is_deeply(ids_in($sink_b), [ ($before + 1 .. $n), 100000 ], 'b has everything after the crash');
ok(applied_once($sink_a) && applied_once($sink_b), 'no commit applied twice by either');

# 4. A third destination, then b dropped while streaming: the slot moves on.
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'c', '" . $sink_c->{url} . "')");
my $c_from = $n;
insert(10);
$node->safe_psql('postgres', "SELECT replicant.drop_destination('p', 'b')");
insert(10);
ok(delivered(), 'delivered after the drop');
is_deeply(ids_in($sink_c), [ ($c_from + 1 .. $n) ], 'c got what committed after its add');
ok(has_ids($sink_a, [ 1 .. $n, 100000 ]), 'a equals the source after the drop');
ok(poll("SELECT confirmed_flush_lsn >= '" . $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()')
		  . "' FROM pg_replication_slots WHERE slot_name = '" . ReplicantTest::slot_name($node, 'postgres', 'p') . "'", 60),
	'the slot is confirmed past the dropped destination\'s checkpoint');
is($node->safe_psql('postgres', "SELECT string_agg(destination, ',' ORDER BY destination) FROM replicant.destination_status WHERE pipeline = 'p'"),
	'c,default', 'destination_status lists what is left');

done_testing();
