# Resync cases from the issue 33 review (rv-resync), one node each.
#
# partition_added: a table published through its partition root; the
#   resync has read p1 when the worker stops; a partition p3 is created
#   meanwhile.  The resumed resync must not send p3's "first" after p1's
#   rows were delivered under the root's name (p3's "last" would sweep them):
#   it plans every table anew, new "first" markers before any read.
# promotion_watermark: a standby promoted while it lagged behind what the
#   old primary had delivered: the new primary's LSNs start below the sink's
#   watermark.  The resync's "last" markers carry lost_to, below it: the
#   sink lets its watermark go back there (docs/sink-protocol.md), and takes
#   the new primary's commits.
# unpublished_delete: a publication with publish = 'insert, update': a
#   row deleted at the source stays at the sink, as at a subscriber; a
#   resync must not sweep it ("sweep": false on the markers).
# messages_refused: resync_pipeline() on a pipeline with messages => true
#   whose slot still works (it holds a committed message the sink has not
#   acknowledged) is refused: the resync would drop the slot and the
#   message with it.
# request_at_finish: a resync_pipeline() committed after the resync's
#   last markers, before it ended (held at fault point resync_finish), is
#   not lost: the resync starts over.
#
# versions: all
use strict;
use warnings;
use MIME::Base64;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

# partition_added
{
	my $node = ReplicantTest::new_node('partadded', conf => "log_statement = none");
	$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE r (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
CREATE TABLE p1 PARTITION OF r FOR VALUES FROM (1) TO (10001);
CREATE TABLE p2 PARTITION OF r FOR VALUES FROM (10001) TO (20001);
INSERT INTO r SELECT g, g FROM generate_series(1, 20000) g;
CREATE PUBLICATION r_pub FOR TABLE r WITH (publish_via_partition_root = true);
});
	my $sink = ReplicantTest::start_sink(name => 'partadded');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('part', 'r_pub', '$sink->{url}', snapshot => 'initial',"
		  . " batch_max_bytes => 2048, snapshot_workers => 1)");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.r']),
		'partition_added: the initial snapshot is delivered');
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'part'"),
		'partition_added: streaming');

	$sink->control({ delay_ms => 20 });
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('part')");
	ok(ReplicantTest::poll($node,
			"SELECT s.state = 'resyncing' AND (SELECT bool_and(sh.done) FROM replicant.snapshot_shards sh"
			  . "   JOIN replicant.backfills b ON b.id = sh.backfill_id"
			  . "  WHERE b.kind = 'initial' AND b.relid = 'p1'::regclass)"
			  . "  FROM replicant.status s WHERE s.pipeline = 'part'", 120),
		'partition_added: the resync has read p1');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM replicant.backfills WHERE kind = 'initial' AND state <> 'done'"),
		'2', 'partition_added: and has not sent its last markers');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('part')");
	ok(ReplicantTest::poll($node, "SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'part'"),
		'partition_added: the worker stopped mid-resync');
	$node->safe_psql('postgres', q{
CREATE TABLE p3 PARTITION OF r FOR VALUES FROM (20001) TO (30001);
INSERT INTO r SELECT g, g FROM generate_series(20001, 20010) g;
});
	$sink->control({ delay_ms => 0 });
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('part')");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'part'", 120),
		'partition_added: the resync ends');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.r'], 30),
		'partition_added: the sink equals the source (p1 included)');
	is($sink->stats->{rows_swept}, 0, 'partition_added: nothing swept (no row was deleted)');
	$node->stop;
}

# promotion_watermark
{
	my $primary = ReplicantTest::new_node('wmprimary',
		conf => "log_statement = none\nreplicant.max_restart_delay = 2000");
	my $sink = ReplicantTest::start_sink(name => 'wm');
	$primary->safe_psql('postgres', qq{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION pro_pub FOR TABLE t;
SELECT pg_create_physical_replication_slot('standby1');
SELECT replicant.create_pipeline('pro', 'pro_pub', '$sink->{url}', on_slot_loss => 'resync',
    http_timeout_ms => 2000, connect_timeout_ms => 500);
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g;
});
	$primary->backup('bk');
	my $standby = PostgreSQL::Test::Cluster->new('wmstandby');
	$standby->init_from_backup($primary, 'bk', has_streaming => 1);
	$standby->append_conf('postgresql.conf', "primary_slot_name = 'standby1'");
	$standby->start;
	ok(ReplicantTest::wait_until_synced($primary, 'postgres', $sink, ['public.t']),
		'promotion_watermark: the sink has the first rows');
	$primary->wait_for_catchup('wmstandby');

	# The standby stops receiving; the primary writes (and delivers) on.
	$standby->stop;
	$primary->safe_psql('postgres', q{
CREATE TABLE unpublished (v text);
INSERT INTO unpublished SELECT repeat('x', 500) FROM generate_series(1, 20000);
UPDATE t SET v = v || ' old-primary' WHERE id % 10 = 0;
});
	ok(ReplicantTest::wait_until_synced($primary, 'postgres', $sink, ['public.t']),
		"promotion_watermark: the sink has the old primary's last update");
	my $watermark = $primary->safe_psql('postgres',
		"SELECT checkpoint_lsn FROM replicant.status WHERE pipeline = 'pro'");
	$primary->stop('immediate');

	$standby->start;
	$standby->promote;
	ok(ReplicantTest::poll($standby,
			"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'pro'", 180),
		'promotion_watermark: the pipeline resynced on the new primary and streams');
	is($standby->safe_psql('postgres', "SELECT pg_current_wal_lsn() < '$watermark'::pg_lsn"),
		't', "promotion_watermark: the new primary's WAL is below the old primary's delivered $watermark");

	$standby->safe_psql('postgres', q{
UPDATE t SET v = v || ' new-primary' WHERE id % 3 = 0;
INSERT INTO t SELECT g, 'n' || g FROM generate_series(301, 350) g;
DELETE FROM t WHERE id % 7 = 0;
});
	ok(ReplicantTest::wait_until_synced($standby, 'postgres', $sink, ['public.t'], 60),
		'promotion_watermark: the sink equals the new primary, with its changes after the resync');
	is($sink->stats->{duplicate_transactions}, 0, 'promotion_watermark: no commit taken for a re-delivery');
	is($sink->stats->{watermark_resets}, 1, 'promotion_watermark: the sink reset its watermark once');
	$standby->stop;
}

# unpublished_delete
{
	my $node = ReplicantTest::new_node('nodelete', conf => "log_statement = none");
	$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE hist (id int PRIMARY KEY, v text);
CREATE TABLE full_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION hist_pub FOR TABLE hist WITH (publish = 'insert, update');
CREATE PUBLICATION full_pub FOR TABLE full_t;
INSERT INTO hist SELECT g, 'v' || g FROM generate_series(1, 100) g;
INSERT INTO full_t SELECT g, 'v' || g FROM generate_series(1, 100) g;
});
	my $sink = ReplicantTest::start_sink(name => 'nodelete');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('hist', ARRAY['hist_pub', 'full_pub'], '$sink->{url}', snapshot => 'initial')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.hist', 'public.full_t']),
		'unpublished_delete: the initial snapshot is delivered');
	my $sink_count = sub { my $d = $sink->dump($_[0]); return scalar($d =~ tr/\n//); };

	# Deleted while the pipeline is disabled, its slot dropped: the resync's gap.
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('hist')");
	ok(ReplicantTest::poll($node, "SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'hist'"),
		'unpublished_delete: disabled');
	$node->safe_psql('postgres', q{
DELETE FROM hist WHERE id <= 40;
DELETE FROM full_t WHERE id <= 40;
INSERT INTO hist VALUES (101, 'v101');
});
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('hist')");
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('hist')");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' AND resync_reason IS NULL FROM replicant.status s"
			  . " JOIN replicant.pipelines p ON p.name = s.pipeline WHERE s.pipeline = 'hist'", 120),
		'unpublished_delete: the resync ends');
	is($sink->stats->{resyncs_swept}, 2, 'unpublished_delete: both last markers were applied');
	is($sink_count->('public.hist'), 101,
		'unpublished_delete: the sink keeps the rows whose deletes are not published');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.full_t']),
		'unpublished_delete: a table whose deletes are published is swept');
	$node->stop;
}

# messages_refused
{
	my $node = ReplicantTest::new_node('msgs', conf => "log_statement = none");
	my $sink = ReplicantTest::start_sink(name => 'msgs');
	$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE orders (id int PRIMARY KEY, total numeric);
CREATE PUBLICATION outbox_pub FOR TABLE orders;
});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('outbox', 'outbox_pub', '$sink->{url}', messages => true,"
		  . " http_timeout_ms => 2000, connect_timeout_ms => 500)");
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'outbox'"),
		'messages_refused: streaming');
	$sink->stop;
	$node->safe_psql('postgres', q{
BEGIN;
INSERT INTO orders VALUES (2, 20);
SELECT pg_logical_emit_message(true, 'outbox', 'order 2 created');
COMMIT;
});
	ok(ReplicantTest::poll($node, "SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'outbox'"),
		'messages_refused: retrying while the sink is away');
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.resync_pipeline('outbox')");
	isnt($ret, 0, 'messages_refused: resync_pipeline() is refused');
	like($err, qr/pipeline "outbox" delivers logical messages and its replication slot still works/,
		'messages_refused: with a clear reason');
	$sink->restart;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['orders']),
		'messages_refused: the rows are there');
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' AND resync_reason IS NULL FROM replicant.status s"
			  . " JOIN replicant.pipelines p ON p.name = s.pipeline WHERE s.pipeline = 'outbox'"),
		'messages_refused: streaming, no resync');
	my @got = map { decode_base64($_->{content}) } @{ $sink->messages };
	ok((grep { $_ eq 'order 2 created' } @got), 'messages_refused: the committed message was delivered');
	$node->stop;
}

# request_at_finish
{
	my $node = ReplicantTest::new_node('atfinish', conf => "log_statement = none");
	my $sink = ReplicantTest::start_sink(name => 'atfinish');
	$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION t_pub FOR TABLE t;
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;
});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('fin', 't_pub', '$sink->{url}', snapshot => 'initial')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.t']),
		'request_at_finish: the initial snapshot is delivered');
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'fin'"),
		'request_at_finish: streaming');
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET replicant.fault_point = 'resync_finish:hold'; SELECT pg_reload_conf()");
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('fin')");
	ok($node->wait_for_log(qr/fault point "resync_finish" reached, holding/, $offset),
		'request_at_finish: the resync sent its last markers and holds before it ends');
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('fin')");
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'streaming' AND resync_reason IS NULL FROM replicant.status s"
			  . " JOIN replicant.pipelines p ON p.name = s.pipeline WHERE s.pipeline = 'fin'", 120),
		'request_at_finish: the pipeline streams');
	my $log = substr(slurp_file($node->logfile), $offset);
	my $began = () = $log =~ /event=resync_began pipeline=fin /g;
	is($began, 2, 'request_at_finish: the second request made a resync of its own');
	$node->safe_psql('postgres', "INSERT INTO t VALUES (101, 'after')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.t']),
		'request_at_finish: and delivers');
	$node->stop;
}

done_testing();
