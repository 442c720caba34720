# The DBLog window follows WAL order, not snapshot visibility: a transaction
# whose commit record is already in WAL (below the chunk's low watermark)
# can still be invisible to the chunk's snapshot, since a backend writes its
# commit record before it leaves the proc array.  The chunk then reads the
# old row; delivered at the high watermark it would overwrite the newer
# change the stream already delivered.
#
# The slowed commit: synchronous_standby_names names a standby that never
# connects, so a session with synchronous_commit = on writes and flushes its
# commit record, then waits in SyncRepWaitForLSN, which comes before
# ProcArrayEndTransaction: other snapshots do not see the transaction until
# the wait is released, while logical decoding already delivers it.  Every
# other session commits with synchronous_commit = local and never waits.
#
# Run once under READ COMMITTED and once with default_transaction_isolation
# = 'repeatable read' on the database (chunk reads must not use a
# transaction snapshot taken before the low watermark).
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('visibility', conf => "synchronous_commit = local");

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE vis (id int PRIMARY KEY, v text NOT NULL);
	INSERT INTO vis SELECT g, 'old' FROM generate_series(1, 3000) g;
	CREATE PUBLICATION vis_pub FOR TABLE vis;
});

sub sink_value
{
	my ($sink, $id) = @_;
	my ($row) = grep { /"id":$id[,}]/ } split /\n/, $sink->dump('public.vis');
	return $row && $row =~ /"v":"([^"]*)"/ ? $1 : '';
}

sub set_standby
{
	my ($names) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = '$names'");
	$node->reload;
	$node->poll_query_until('postgres',
		"SELECT current_setting('synchronous_standby_names') = '$names'");
}

my $round = 0;
for my $isolation ('read committed', 'repeatable read')
{
	$round++;
	my $label = $isolation;
	my $sink = ReplicantTest::start_sink(name => "vis$round");
	$node->safe_psql('postgres', "UPDATE vis SET v = 'old' WHERE id = 1500");
	$node->safe_psql('postgres',
		"ALTER DATABASE postgres SET default_transaction_isolation = '$isolation'");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('vis$round', 'vis_pub', '$sink->{url}')");
	$node->poll_query_until('postgres',
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'vis$round'");

	# The slowed commit: in WAL and delivered, invisible to new snapshots.
	my $new = "new$round";
	set_standby('nowhere');
	my ($out, $err) = ('', '');
	my $slowed = IPC::Run::start(
		[
			'psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
			'-c', "SET synchronous_commit = on; UPDATE vis SET v = '$new' WHERE id = 1500"
		],
		'>', \$out, '2>', \$err);
	ok(ReplicantTest::poll($node, "SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
		"$label: the UPDATE's commit waits for the standby");
	my $deadline = time() + 60;
	sleep 0.1 while sink_value($sink, 1500) ne $new && time() < $deadline;
	is(sink_value($sink, 1500), $new, "$label: the stream delivered the waiting commit");
	is($node->safe_psql('postgres', 'SELECT v FROM vis WHERE id = 1500'), 'old',
		"$label: new snapshots do not see it yet");

	# The chunk either reads (the stale row, before the fix) or waits.
	my $log_offset = -s $node->logfile;
	my $id = $node->safe_psql('postgres',
		"SELECT replicant.backfill('vis$round', 'vis', mode => 'keyset')");
	$deadline = time() + 60;
	sleep 0.1
	  while $node->safe_psql('postgres',
		"SELECT state <> 'done' FROM replicant.backfill_status WHERE id = $id") eq 't'
	  && !$node->log_contains('defers a backfill chunk of table "vis"', $log_offset)
	  && time() < $deadline;
	is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE id = $id"),
		'0', "$label: no chunk was read while the commit was invisible");

	set_standby('');
	$slowed->finish;
	ok($node->poll_query_until('postgres',
			"SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id"),
		"$label: the backfill finishes");
	is(sink_value($sink, 1500), $new,
		"chunk_snapshot_misses_delivered_commit ($label): the chunk's stale read did not overwrite the delivered change");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['vis'], 60),
		"$label: the sink equals the source");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('vis$round')");
	$sink->stop;
}

done_testing();
