# A destination added to a streaming pipeline with snapshot => 'incremental'
# (issue #34 item 4): it gets every table's rows through backfills of its
# own, beside the stream, and equals the source, changes during the
# backfill included; the destination already there gets no read of them;
# a destination dropped at once takes its backfills with it; one whose sink
# refuses its backfill halts alone (it halted the pipeline), its backfill
# waits for it without moving, and runs to the end once it is resumed;
# backfill(..., destination => name) reads a table for that one alone.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('dest_snapshot', conf => "replicant.checkpoint_interval = 0");
# a answers its initial snapshot late (each batch applied, then 300 ms):
# its rows are all there before its last "last" marker is, as on a loaded
# machine, so counting a's reads must wait for the snapshot's end.
my $sink_a = ReplicantTest::start_sink(name => 'sink_a', delay_ms => 300);
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');
my $sink_c = ReplicantTest::start_sink(name => 'sink_c');
my $sink_d = ReplicantTest::start_sink(name => 'sink_d');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE TABLE u (id bigint PRIMARY KEY, w int);
	INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3000) g;
	INSERT INTO u SELECT g, g FROM generate_series(1, 500) g;
	CREATE PUBLICATION pub FOR TABLE t, u;
});

sub poll { return ReplicantTest::poll($node, @_); }

sub reads
{
	my ($sink) = @_;
	return scalar grep { $_->{kind} eq 'snapshot' } @{ $sink->stats->{accepted} };
}

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}', snapshot => 'initial', destination => 'a')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ 't', 'u' ], 120), 'a has the tables');
ok(poll("SELECT count(*) = 2 AND bool_and(state = 'done') FROM replicant.backfills WHERE kind = 'initial'", 120),
	"a's initial snapshot ends (its last markers answered)");
$sink_a->control({ clear => 1 });
my $a_reads = reads($sink_a);
ok($a_reads > 0, 'a got them as reads of its initial snapshot');

# b: added while a streams, with changes before, during and after its
# backfills (small batches, so that they interleave with its chunks).
$node->safe_psql('postgres', "UPDATE t SET v = 'before' WHERE id <= 10");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'b', '$sink_b->{url}', snapshot => 'incremental',"
	  . " batch_max_transactions => 50)");
is($node->safe_psql('postgres',
	"SELECT string_agg(relation::text || ':' || destination, ',' ORDER BY relation::text)"
	  . " FROM replicant.backfill_status WHERE destination IS NOT NULL"),
	't:b,u:b', 'a backfill of each published table, for b');
foreach my $i (1 .. 20)
{
	$node->safe_psql('postgres', qq{
		UPDATE t SET v = 'during $i' WHERE id % 20 = $i % 20;
		DELETE FROM t WHERE id = $i * 100 + 11;
		INSERT INTO t VALUES (3000 + $i, 'new');
		UPDATE u SET w = -w WHERE id = $i * 20;
	});
}
ok(poll("SELECT count(*) = 2 AND bool_and(state = 'done') FROM replicant.backfill_status WHERE destination = 'b'",
		180), "b's backfills run to the end");
$node->safe_psql('postgres', 'DELETE FROM u WHERE id > 490');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_b, [ 't', 'u' ], 120), 'b equals the source');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ 't', 'u' ], 120), 'a equals the source');
is(reads($sink_a), $a_reads, "a got no read of b's backfills");
ok(reads($sink_b) > 0, 'b got the rows as reads');

# c: added with a snapshot and dropped at once: nothing of it is left.
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'c', '$sink_c->{url}', snapshot => 'incremental')");
$node->safe_psql('postgres', "SELECT replicant.drop_destination('p', 'c')");
is($node->safe_psql('postgres',
	"SELECT count(*) FROM replicant.backfills WHERE destination_id IS NOT NULL AND state <> 'done'"),
	'0', "c's backfills went with it");
$node->safe_psql('postgres', "INSERT INTO t VALUES (5000, 'after c')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_b, [ 't', 'u' ], 120), 'b streams on');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ 't', 'u' ], 120), 'a streams on');
is(reads($sink_a), $a_reads, 'a still got no read');

# d: its sink refuses; nothing commits after the add, so the first thing
# d is sent is its backfill.
$sink_d->control({ fail_status => 400 });
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'd', '$sink_d->{url}', snapshot => 'incremental')");
ok(poll("SELECT state = 'halted' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'd'", 120),
	'd halts');
like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.destinations WHERE name = 'd'"),
	qr/^sink rejected backfill batch: HTTP 400/, 'at its backfill');
is($node->safe_psql('postgres', "SELECT coalesce(halt_reason, '') FROM replicant.pipelines WHERE name = 'p'"),
	'', 'the pipeline is not halted');
is($node->safe_psql('postgres',
	"SELECT count(*) || ' ' || bool_and(state IN ('planned', 'running') AND rows_done = 0)"
	  . " || ' ' || min(waiting_for) FROM replicant.backfill_status WHERE destination = 'd'"),
	'2 true destination "d" is halted', "d's backfills wait for it, having moved nothing");
$node->safe_psql('postgres', "INSERT INTO t VALUES (5001, 'd halted')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ 't', 'u' ], 120), 'a streams on');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_b, [ 't', 'u' ], 120), 'b streams on');
$sink_d->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('p', 'd')");
ok(poll("SELECT count(*) = 2 AND bool_and(state = 'done') FROM replicant.backfill_status WHERE destination = 'd'",
		180), "resumed, d's backfills run to the end");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_d, [ 't', 'u' ], 120), 'd equals the source');
is(reads($sink_a), $a_reads, 'a got no read of them');

# e: a backfill of u for b alone: b gets each of its rows as a read once
# more, a and d none.
sub read_rows
{
	my ($sink) = @_;
	my $rows = 0;
	$rows += $_->{changes} foreach grep { $_->{kind} eq 'snapshot' } @{ $sink->stats->{accepted} };
	return $rows;
}
my %before = (b => read_rows($sink_b), d => reads($sink_d));
my $u_rows = $node->safe_psql('postgres', 'SELECT count(*) FROM u');
$node->safe_psql('postgres', "SELECT replicant.backfill('p', 'u', destination => 'b')");
ok(poll("SELECT state = 'done' AND destination = 'b' FROM replicant.backfill_status"
		  . " WHERE id = (SELECT max(id) FROM replicant.backfill_status)", 180),
	"b's backfill of u runs to the end");
$node->safe_psql('postgres', "INSERT INTO t VALUES (5002, 'after the backfill of u')");
foreach my $sink ($sink_a, $sink_b, $sink_d)
{
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 't', 'u' ], 120), "$sink->{name} equals the source");
}
is(read_rows($sink_b) - $before{b}, $u_rows, "b got u's rows as reads");
is(reads($sink_a) . ' ' . reads($sink_d), "$a_reads $before{d}", 'a and d got none');

done_testing();
