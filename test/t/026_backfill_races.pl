# Backfills against concurrent DDL (issue #30 item 1): a rewriting ALTER
# (ALTER COLUMN ... TYPE) whose transaction holds the table's lock while a
# chunk starts, twice per backfill, in each read mode: every row arrives.
# A chunk used to take its snapshot before it waited for the lock, then read
# the rewritten heap, whose rows all carry the ALTER's xid, under that
# snapshot: keyset read nothing and marked the backfill done, ctid and
# bitmap skipped a window or a range.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('backfill_races');

sub query { return $node->safe_psql('postgres', @_); }
sub poll  { return ReplicantTest::poll($node, @_); }

# ---- a rewrite that holds the lock while a chunk starts -----------------------------
# No TOASTable column, so that ctid is planned without a warning; enough
# rows for dozens of chunks in every mode.
query(q{
CREATE EXTENSION replicant;
CREATE TABLE rw (id int PRIMARY KEY, n int NOT NULL, m bigint NOT NULL);
INSERT INTO rw SELECT g, g, g * 7 FROM generate_series(1, 100000) g;
ANALYZE rw;
CREATE PUBLICATION rw_pub FOR TABLE rw;
});

# Rewrites rw in a transaction that holds its lock until the pipeline's
# worker waits for it, i.e. until a chunk has started (after $meanwhile
# ran, if given); then commits.
sub rewrite_under_chunk
{
	my ($pipeline, $type, $meanwhile) = @_;
	my $psql = $node->background_psql('postgres');
	$psql->query_safe("BEGIN; ALTER TABLE rw ALTER COLUMN n TYPE $type");
	$meanwhile->() if $meanwhile;
	my $waited = poll(qq{
SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE NOT l.granted AND l.relation = 'rw'::regclass
                  AND a.application_name = 'replicant pipeline $pipeline')});
	$psql->query_safe('COMMIT');
	$psql->quit;
	return $waited;
}

# The first rewrite holds the lock while the backfill's first chunk starts
# (planned while the pipeline was disabled, read once it is enabled), the
# second one while a later chunk starts.
foreach my $mode ('keyset', 'ctid', 'bitmap')
{
	my $p    = "rw_$mode";
	my $sink = ReplicantTest::start_sink(name => "sink_$p", delay_ms => 500);
	query("SELECT replicant.create_pipeline('$p', 'rw_pub', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$mode: the pipeline streams");
	query("SELECT replicant.disable_pipeline('$p')");
	my $id = query("SELECT replicant.backfill('$p', 'rw', mode => '$mode')");
	ok(rewrite_under_chunk($p, 'bigint',
			sub { query("SELECT replicant.enable_pipeline('$p')"); }),
		"$mode: rewrite 1 held the table's lock while the first chunk waited for it");
	ok(poll("SELECT rows_done > 0 FROM replicant.backfill_status WHERE id = $id"),
		"$mode: a chunk was delivered after rewrite 1");
	my $state = query("SELECT state FROM replicant.backfill_status WHERE id = $id");
	if ($state eq 'running')
	{
		ok(rewrite_under_chunk($p, 'int'),
			"$mode: rewrite 2 held the table's lock while a later chunk waited for it");
	}
	else
	{
		fail("$mode: the backfill still runs at rewrite 2 (it is $state)");
	}
	$sink->control({ clear => 1 });
	ok(poll("SELECT state <> 'running' FROM replicant.backfill_status WHERE id = $id", 180),
		"$mode: the backfill ends");
	is(query("SELECT state FROM replicant.backfill_status WHERE id = $id"), 'done',
		"$mode: the backfill is done");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['rw'], 60),
		"backfill_snapshot_before_lock ($mode): every row arrives across two rewrites");
	query("SELECT replicant.drop_pipeline('$p')");
	$sink->stop;
}

$node->stop;
done_testing();
