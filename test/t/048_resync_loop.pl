# A resync does not loop (issue 33 review, rv-resync 090 and 095).
#
# budget: the resync's reads take long while an unrelated writer fills the
#   WAL past max_retained_wal: the first stream cycle after the resync must
#   not count that WAL as the sink's (the new slot confirmed nothing yet)
#   and give the new slot up, again and again.  The budget (16MB) is above
#   what the stream lags behind that writer (about 10 MB a second) when
#   streaming, below what the reads leave (about 35 MB).
# keep_size: the server invalidates each new slot (max_slot_wal_keep_size)
#   while the resync reads: after REPLICANT_RESYNC_MAX_LOSSES (3) losses in a
#   row with no stream batch delivered in between, the pipeline halts with a
#   clear reason instead of resyncing forever; resync_pipeline() starts over.
#
# versions: all
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

# A node with a published table of 3000 rows, streaming to a sink that
# takes 20 ms a request (the resync's reads take a few seconds).
sub setup
{
	my ($name, $options, %node_opts) = @_;
	my $node = ReplicantTest::new_node($name, %node_opts);
	$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE unpublished (id bigserial PRIMARY KEY, v text);
CREATE TABLE loop_t (id int PRIMARY KEY, v text);
INSERT INTO loop_t SELECT g, 'row ' || g FROM generate_series(1, 3000) g;
CREATE PUBLICATION loop_pub FOR TABLE loop_t;
});
	my $sink = ReplicantTest::start_sink(name => $name);
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('loop', 'loop_pub', '$sink->{url}', snapshot => 'initial',"
		  . " on_slot_loss => 'resync', batch_max_bytes => 2048, snapshot_workers => 1$options)");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.loop_t']),
		"$name: the initial snapshot is delivered");
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'loop'"),
		"$name: streaming");
	$sink->control({ delay_ms => 20 });
	return ($node, $sink);
}

sub count_in_log
{
	my ($node, $offset, $re) = @_;
	my $log = substr(slurp_file($node->logfile), $offset);
	return scalar(() = $log =~ /$re/g);
}

# budget
{
	my ($node, $sink) = setup('budget', ", max_retained_wal => '16MB'",
		conf => "log_statement = none\nmax_wal_size = 256MB\nreplicant.max_restart_delay = 2000");
	$sink->control({ delay_ms => 40 });

	# About 10 MB of WAL a second for a while, none of it published.
	my ($out, $err) = ('', '');
	my $writer = IPC::Run::start(
		[ 'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', 'postgres', '-c',
			"DO \$\$ BEGIN FOR r IN 1 .. 150 LOOP"
			  . " INSERT INTO unpublished (v) SELECT repeat('x', 400) FROM generate_series(1, 2000);"
			  . " COMMIT; PERFORM pg_sleep(0.1); END LOOP; END \$\$;" ],
		'>', \$out, '2>', \$err);
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('loop')");
	ok($node->wait_for_log(qr/replicant pipeline "loop" finished its resync/, $offset),
		'budget: the requested resync ends');
	# The workload ends; then a published row must reach the sink by the stream.
	$writer->finish;
	$node->safe_psql('postgres', "INSERT INTO loop_t VALUES (3001, 'after')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.loop_t']),
		'budget: a row written after the workload is delivered');
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' AND resync_reason IS NULL FROM replicant.status s"
			  . " JOIN replicant.pipelines p ON p.name = s.pipeline WHERE s.pipeline = 'loop'"),
		'budget: streaming, no resync under way');
	my $lost = count_in_log($node, $offset,
		qr/replicant pipeline "loop" lost its replication slot and resyncs: replication slot given up/);
	my $finished = count_in_log($node, $offset, qr/replicant pipeline "loop" finished its resync/);
	is($lost, 0, 'budget: no slot given up after the requested resync, the sink being healthy');
	is($finished, 1, 'budget: one resync, the requested one');
	is($node->safe_psql('postgres', "SELECT resync_losses FROM replicant.pipelines WHERE name = 'loop'"),
		'0', 'budget: no loss counted');
	$node->stop;
}

# keep_size
{
	my ($node, $sink) = setup('keepsize', '', initdb_extra => ['--wal-segsize=1'],
		conf => "log_statement = none\nmax_wal_size = 32MB\nmin_wal_size = 4MB\nreplicant.max_restart_delay = 2000");
	$node->safe_psql('postgres', "ALTER SYSTEM SET max_slot_wal_keep_size = '16MB'; SELECT pg_reload_conf()");

	# WAL and checkpoints until stopped: each new slot is invalidated while the resync reads.
	my ($host, $port) = ($node->host, $node->port);
	my ($out, $err) = ('', '');
	my $writer = IPC::Run::start(
		[ 'bash', '-c', "while true; do psql -X -q -h '$host' -p $port -d postgres"
			  . " -c \"INSERT INTO unpublished (v) SELECT repeat('x', 400) FROM generate_series(1, 2000)\""
			  . " -c 'CHECKPOINT'; sleep 0.1; done" ],
		'>', \$out, '2>', \$err);
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('loop')");
	ok(ReplicantTest::poll($node,
			"SELECT halt_reason LIKE 'the replication slot was lost 3 times in a row before the stream delivered a batch, %'"
			  . " FROM replicant.pipelines WHERE name = 'loop'", 300),
		'keep_size: the pipeline halts after 3 slot losses in a row');
	$writer->kill_kill;
	my $lost = count_in_log($node, $offset,
		qr/replicant pipeline "loop" lost its replication slot and resyncs: replication slot \S+ was invalidated/);
	is($lost, 3, 'keep_size: 3 resyncs after the requested one, then the halt');
	like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'loop'"),
		qr/raise max_retained_wal or max_slot_wal_keep_size, then call replicant.resync_pipeline\(\)\): replication slot \S+ was invalidated/,
		'keep_size: the reason says why and what to do');

	# Without the writer, resync_pipeline() resyncs again, and the stream delivers.
	$node->safe_psql('postgres', "ALTER SYSTEM RESET max_slot_wal_keep_size; SELECT pg_reload_conf()");
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('loop')");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' AND resync_reason IS NULL FROM replicant.status s"
			  . " JOIN replicant.pipelines p ON p.name = s.pipeline WHERE s.pipeline = 'loop'", 180),
		'keep_size: resync_pipeline() after the halt resyncs, and the pipeline streams');
	$node->safe_psql('postgres', "INSERT INTO loop_t VALUES (3001, 'after')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.loop_t']),
		'keep_size: and delivers');
	ok(ReplicantTest::poll($node, "SELECT resync_losses = 0 FROM replicant.pipelines WHERE name = 'loop'"),
		'keep_size: a delivered batch starts the count over');
	$node->stop;
}

done_testing();
