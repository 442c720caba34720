# Initial snapshots against concurrent DDL:
#
#   ALTER TABLE ... TYPE (a rewrite) while the table is being read: the
#     table is read again in full, never marked done with rows missing
#   a table added to the publication between the snapshot's planning and
#     the slot's creation is snapshotted too
#   row-level security enabled on a table before its snapshot reads it: the
#     pipeline halts, delivering none of its rows (the shard workers read
#     the heap, which would bypass the policies; applying them would deliver
#     a subset as if it were the table)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('snapraces',
	conf => "max_prepared_transactions = 5\nmax_wal_size = 4GB");
$node->safe_psql('postgres', 'CREATE EXTENSION replicant');

sub poll { return ReplicantTest::poll($node, @_); }

# ---- a rewrite during the snapshot -----------------------------------------------
{
	# Several 1024-block windows, so the rewrite lands between two of them.
	$node->safe_psql('postgres', q{
CREATE TABLE big (id int PRIMARY KEY, n int NOT NULL, pad text NOT NULL);
INSERT INTO big SELECT g, g, repeat('x', 100) FROM generate_series(1, 300000) g;
ANALYZE big;
CREATE PUBLICATION big_pub FOR TABLE big;
});
	my $sink = ReplicantTest::start_sink(name => 'sink_rewrite');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('rewrite', 'big_pub', '$sink->{url}',"
		  . " snapshot => 'initial', snapshot_workers => 1)");
	ok(poll("SELECT rows_done > 0 AND state <> 'done' FROM replicant.backfill_status"
			  . " WHERE relation = 'big'::regclass", 120),
		'rewrite: the snapshot is under way');
	$node->safe_psql('postgres', 'ALTER TABLE big ALTER COLUMN n TYPE bigint');
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE relation = 'big'::regclass", 300)
		  || poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'rewrite'", 1),
		'rewrite: the snapshot ends');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['big'], 120),
		'rewrite: every row of the rewritten table reached the sink');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rewrite')");
	$node->safe_psql('postgres', 'DROP TABLE big');
	$sink->stop;
}

# ---- a table added between planning and slot creation ---------------------------
{
	$node->safe_psql('postgres', q{
CREATE TABLE early (id int PRIMARY KEY, v text);
CREATE TABLE late (id int PRIMARY KEY, v text);
INSERT INTO early SELECT g, 'e' FROM generate_series(1, 100) g;
INSERT INTO late SELECT g, 'l' FROM generate_series(1, 100) g;
CREATE PUBLICATION race_pub FOR TABLE early;
});
	# Slot creation waits for this transaction: planning is done by then.
	$node->safe_psql('postgres',
		"BEGIN; INSERT INTO early VALUES (1000, 'held'); PREPARE TRANSACTION 'hold'");
	my $sink = ReplicantTest::start_sink(name => 'sink_race');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('race', 'race_pub', '$sink->{url}', snapshot => 'initial')");
	my $slot = ReplicantTest::slot_name($node, 'postgres', 'race');
	ok(poll("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')"
			  . " AND EXISTS (SELECT 1 FROM replicant.backfill_status WHERE pipeline = 'race')"),
		'planning race: planned, creating the slot');
	$node->safe_psql('postgres', 'ALTER PUBLICATION race_pub ADD TABLE late');
	$node->safe_psql('postgres', "COMMIT PREPARED 'hold'");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'race'", 60),
		'planning race: streaming');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [ 'early', 'late' ], 60),
		'planning race: the table added meanwhile was snapshotted');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('race')");
	$sink->stop;
}

# ---- row-level security enabled before the snapshot reads the table -------------
{
	$node->safe_psql('postgres', q{
CREATE ROLE snapowner LOGIN;
GRANT USAGE ON SCHEMA replicant TO snapowner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO snapowner;
CREATE TABLE secured (id int PRIMARY KEY, v text);
INSERT INTO secured SELECT g, 'SECRETVALUE ' || g FROM generate_series(1, 100) g;
GRANT SELECT ON secured TO snapowner;
CREATE PUBLICATION secured_pub FOR TABLE secured;
});
	# create_pipeline refuses a table the owner cannot read whole: enable
	# row-level security while the slot's creation waits for this one.
	$node->safe_psql('postgres',
		"BEGIN; INSERT INTO early VALUES (1001, 'held'); PREPARE TRANSACTION 'hold_rls'");
	my $sink = ReplicantTest::start_sink(name => 'sink_rls');
	$node->safe_psql('postgres',
		"SET ROLE snapowner; SELECT replicant.create_pipeline('rls', 'secured_pub', '$sink->{url}', snapshot => 'initial')");
	my $slot = ReplicantTest::slot_name($node, 'postgres', 'rls');
	ok(poll("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot')"),
		'row-level security: planned, creating the slot');
	$node->safe_psql('postgres', q{
ALTER TABLE secured ENABLE ROW LEVEL SECURITY;
CREATE POLICY evens ON secured FOR SELECT USING (id % 2 = 0);
});
	$node->safe_psql('postgres', "COMMIT PREPARED 'hold_rls'");
	ok(poll("SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = 'rls'", 60),
		'row-level security: the pipeline halts');
	like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'rls'"),
		qr/^table "secured" has row-level security that the pipeline owner does not bypass$/,
		'row-level security: last_error says why');
	is($sink->dump('public.secured'), '', 'row-level security: no row of the table was delivered');
	isnt($node->safe_psql('postgres',
			"SELECT state FROM replicant.backfill_status WHERE relation = 'secured'::regclass"),
		'done', 'row-level security: its snapshot is not recorded as complete');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rls')");
	$sink->stop;
}

$node->stop;
done_testing();
