# NATS beside other destinations (issue #34, docs/destinations-design.md
# §2.4): one pipeline delivers to a NATS stream as its "default"
# destination, to a second NATS stream as destination "n" and to an HTTP
# sink as "h".  "default" keeps the pipeline's ids and prefix; "n" writes
# ids <pipeline>.n:<lsn>:<position>, the header Replicant-Destination and
# the default prefix replicant.<pipeline>-n.  Each stream holds every
# change once and in commit order, across a killed worker; a second NATS
# destination on one stream is refused; one whose stream's last message is
# another destination's halts alone.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('D', 'replicant.p.>', duplicates_ms => 2000);
$nats->create_stream('N', 'replicant.p-n.>', duplicates_ms => 2000);

my $node = ReplicantTest::new_node('dest_nats',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0");
my $sink = ReplicantTest::start_sink(name => 'sink_h');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('D') . "')");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'n', '" . $nats->url('N') . "')");
$node->safe_psql('postgres', "SELECT replicant.add_destination('p', 'h', '$sink->{url}')");

# A second NATS destination on a stream the pipeline writes already.
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.add_destination('p', 'x', '" . $nats->url('N') . "')");
like($err, qr/pipeline "p" has another destination on this NATS stream/,
	'a second NATS destination on one stream is refused');
unlike($err, qr/127\.0\.0\.1/, 'without quoting the URL');
# The same stream through one server of the three, by alter_destination.
my $one = "nats://127.0.0.1:$nats->{nodes}[1]{port}/N";
($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.alter_destination('p', 'h', sink_url => '$one')");
like($err, qr/pipeline "p" has another destination on this NATS stream/,
	'and through a server in common, by alter_destination');

my $txns = 0;
srand(129);
sub workload
{
	my ($n) = @_;
	foreach (1 .. $n)
	{
		$txns++;
		my @sql;
		foreach (1 .. 1 + int(rand(4)))
		{
			my $id = 1 + int(rand(30));
			my $r  = rand();
			push @sql,
			  $r < 0.6 ? "INSERT INTO t VALUES ($id, 'v$txns') ON CONFLICT (id) DO UPDATE SET v = excluded.v"
			  : "DELETE FROM t WHERE id = $id";
		}
		$node->safe_psql('postgres', join(";\n", 'BEGIN', @sql, 'COMMIT'));
	}
}

# Polls until the stream's table equals the source's.
sub stream_synced
{
	my ($stream) = @_;
	my $want = Nats::source_state($node, 'postgres', 't', ['id']);
	for (1 .. 300)
	{
		my @msgs = $nats->messages($stream);
		return 1 if Test::More::eq_hash(Nats::table_state(\@msgs, 'public', 't'), $want);
		select(undef, undef, undef, 0.2);
	}
	return 0;
}

sub check_stream
{
	my ($stream, $id_name, $prefix, $destination, $label) = @_;
	my @msgs = $nats->messages($stream);
	my @problems = Nats::problems(\@msgs, $id_name);
	is_deeply([ @problems[ 0 .. ($#problems < 9 ? $#problems : 9) ] ], [],
		"$label: every change once, in commit order, ids $id_name:<lsn>:<position>");
	my @bad = grep {
		$_->{subject} ne "$prefix.public.t"
		  || $_->{headers}{'Replicant-Pipeline'} ne 'p'
		  || ($_->{headers}{'Replicant-Destination'} // '<none>') ne $destination
	} @msgs;
	is(scalar(@bad), 0, "$label: subjects $prefix.public.t, Replicant-Destination $destination");
	ok(scalar(@msgs) > 0, "$label: the stream has messages");
}

workload(40);
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']), 'h equals the source');
ok(stream_synced('D'), "default's stream equals the source");
ok(stream_synced('N'), "n's stream equals the source");
check_stream('D', 'p', 'replicant.p', '<none>', 'default');
check_stream('N', 'p.n', 'replicant.p-n', 'n', 'n');

# A killed worker: each stream skips what it holds, by its own mark.
my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ReplicantTest::kill_worker($node, $pid);
workload(20);
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']), 'after the crash, h equals the source');
ok(stream_synced('D') && stream_synced('N'), 'and so do both streams');
check_stream('D', 'p', 'replicant.p', '<none>', 'default after the crash');
check_stream('N', 'p.n', 'replicant.p-n', 'n', 'n after the crash');

# n's own mark: with checkpoints held back, what n's sink acknowledged
# beyond its checkpoint is decoded again after a crash; past the stream's
# duplicate window (2 s) only the mark keeps it out of the stream twice.
$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.checkpoint_interval = '1h'");
$node->reload;
my $beyond = 0;
for (1 .. 30)
{
	workload(1);
	stream_synced('N') or last;
	my $checkpoint = $node->safe_psql('postgres',
		"SELECT (c.commit_lsn - '0/0')::numeric FROM replicant.checkpoints c"
		  . " JOIN replicant.destinations d ON d.id = c.destination_id WHERE d.name = 'n'");
	my ($in_stream) = sort { $b <=> $a } map { $_->{headers}{'Replicant-Commit-Lsn'} // 0 } $nats->messages('N');
	$beyond = 1, last if $in_stream > $checkpoint;
}
ok($beyond, "n's stream holds changes beyond n's checkpoint");
sleep(3);    # their ids leave the duplicate window
$pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ReplicantTest::kill_worker($node, $pid);
$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.checkpoint_interval");
$node->reload;
workload(5);
ok(stream_synced('N') && stream_synced('D'), 'both streams equal the source again');
check_stream('N', 'p.n', 'replicant.p-n', 'n', "n, decoded again past its checkpoint");

# Another destination's message last under n's prefix: n halts alone (it
# cannot know where it is in the stream), the others stream on.
$node->safe_psql('postgres', "SELECT replicant.drop_destination('p', 'n')");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'n2', '" . $nats->url('N', 'subject_prefix=replicant.p-n') . "')");
workload(5);
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' AND last_error ~ 'written by another pipeline, destination or database'"
		  . " FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'n2'", 90),
	"n2, whose prefix's last message is n's, halts");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']), 'h streams on');
ok(stream_synced('D'), 'and so does the default destination');

# A NATS destination added with a backfill of its own: its reads and the
# snapshot markers are in its stream, the markers naming it.
$node->safe_psql('postgres', "SELECT replicant.drop_destination('p', 'n2')");
$nats->create_stream('K', 'replicant.p-k.>', duplicates_ms => 2000);
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'k', '" . $nats->url('K') . "', snapshot => 'incremental')");
workload(3);
ok(ReplicantTest::poll($node,
		"SELECT state = 'done' FROM replicant.backfill_status WHERE pipeline = 'p' AND destination = 'k'", 90),
	"k's backfill is done");
ok(stream_synced('K'), "k's stream equals the source");
my @markers = grep { ($_->{headers}{'Replicant-Kind'} // '') eq 'marker' } $nats->messages('K');
ok(@markers >= 2, 'the first and last markers are in the stream');
is(scalar(grep { ($_->{json}{destination} // '') ne 'k' || $_->{headers}{'Replicant-Destination'} ne 'k' } @markers),
	0, 'the markers name the destination');

done_testing();
