# A physical standby promoted while a pipeline with on_slot_loss => 'resync'
# had its sink down (resync.c): the promoted server has the pipeline but
# not its slot (no failover slot: the pipeline was created without one, the
# only way on 15 and 16), so the pipeline resyncs there once its sink is
# back, and the reference sink ends equal to the new primary, the rows
# deleted on the old primary while the sink was away swept.
# 040_standby_failover.pl has the same promotion with on_slot_loss 'halt'
# (15) and with a failover slot (17 and later).
#
# versions: all (the promoted server lacks the slot on every version)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $MARK = 'ROWVAL-47e1f0';

my $primary = ReplicantTest::new_node('primary',
	conf => "log_statement = none\nreplicant.max_restart_delay = 2000");
my $sink = ReplicantTest::start_sink();

$primary->safe_psql('postgres', qq{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION pro_pub FOR TABLE t;
SELECT pg_create_physical_replication_slot('standby1');
SELECT replicant.create_pipeline('pro', 'pro_pub', '$sink->{url}', on_slot_loss => 'resync',
    http_timeout_ms => 2000, connect_timeout_ms => 500);
INSERT INTO t SELECT g, '$MARK ' || g FROM generate_series(1, 300) g;
SELECT replicant.create_pipeline('fan', 'pro_pub', 'http://127.0.0.1:9/', enabled => false);
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/', on_slot_loss => 'resync');
});
my $slot = ReplicantTest::slot_name($primary, 'postgres', 'pro');

$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->append_conf('postgresql.conf', "primary_slot_name = 'standby1'");
$standby->start;

ok(ReplicantTest::wait_until_synced($primary, 'postgres', $sink, ['public.t']),
	'the sink has the first rows');
$primary->safe_psql('postgres', "UPDATE t SET v = v || ' u1' WHERE id % 7 = 0");
ok(ReplicantTest::wait_until_synced($primary, 'postgres', $sink, ['public.t']),
	'and the first updates');

# The sink goes away; the primary deletes rows the sink has, and writes on.
$sink->stop;
$primary->safe_psql('postgres', qq{
DELETE FROM t WHERE id % 3 = 0;
UPDATE t SET v = v || ' u2' WHERE id % 5 = 0;
INSERT INTO t SELECT g, '$MARK ' || g FROM generate_series(301, 400) g;
});
ok(ReplicantTest::poll($primary,
		"SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'pro'"),
	'the pipeline retries while its sink is down');
$primary->wait_for_catchup('standby');
is($standby->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'pro'"), 'standby',
	'on the standby the pipeline is in state standby');
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'"),
	'0', 'the standby has no copy of the slot');

$primary->stop('immediate');
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f', 'the standby was promoted');
ok( ReplicantTest::poll($standby,
		"SELECT state = 'resync_pending' FROM replicant.status WHERE pipeline = 'pro'", 120),
	'on the new primary the pipeline, without its slot, waits to resync');
like(
	$standby->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'pro'"),
	qr/^replication slot "\Q$slot\E" does not exist \(it was dropped, or this server is a promoted standby that had no failover copy of it\)$/,
	'last_error says the slot is missing (without the advice of the halt: the resync is the remedy)');

# The new primary writes on; the sink comes back.
$standby->safe_psql('postgres', qq{
DELETE FROM t WHERE id % 11 = 0;
INSERT INTO t SELECT g, '$MARK ' || g FROM generate_series(401, 450) g;
});
$sink->restart;
ok( ReplicantTest::poll($standby,
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'pro'", 180),
	'the pipeline resynced on the new primary and streams');
$standby->safe_psql('postgres', qq{
UPDATE t SET v = v || ' u3' WHERE id % 4 = 0;
DELETE FROM t WHERE id % 13 = 0;
});
ok(ReplicantTest::wait_until_synced($standby, 'postgres', $sink, ['public.t']),
	'the sink equals the new primary');
cmp_ok($sink->stats->{rows_swept}, '>=', 100, 'the rows deleted while the sink was away were swept');
is($standby->safe_psql('postgres', "SELECT last_error IS NULL FROM replicant.status WHERE pipeline = 'pro'"),
	't', 'no error after the resync');
unlike(slurp_file($standby->logfile), qr/\Q$MARK\E/, 'no row value in the server log');

# A pipeline of several destinations resyncs each beside the new slot's
# stream, keeping its sink's watermark: after a promotion, a destination
# whose checkpoint is below where the new timeline began may have a sink
# holding the old primary's commits above the new WAL, so it cannot resync
# (fail closed), neither on request nor after the slot's loss.
my ($rc, $out, $err) = $standby->psql('postgres', "SELECT replicant.resync_pipeline('fan', 'b')");
like($err, qr/destination "b" of pipeline "fan" cannot resync: its checkpoint \S+ is below \S+, where this server's timeline 2 began \(a promoted standby\)/,
	"a destination's resync is refused below the new timeline");
($rc, $out, $err) = $standby->psql('postgres', "SELECT replicant.resync_pipeline('fan')");
like($err, qr/destination "\S+" of pipeline "fan" cannot resync: its checkpoint \S+ is below \S+, where this server's timeline 2 began/,
	"the pipeline's resync is refused too, before its slot would go");
$standby->safe_psql('postgres', "SELECT replicant.enable_pipeline('fan')");
ok( ReplicantTest::poll($standby,
		"SELECT halt_reason ~ '^no destination of the pipeline can resync .*timeline 2 began' FROM replicant.pipelines WHERE name = 'fan'",
		120),
	'after the slot loss, the pipeline of several destinations halts instead of resyncing them');
is($standby->safe_psql('postgres', "SELECT bool_or(slot_released) FROM replicant.destinations d"
	  . " JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'fan'"),
	'f', 'its destinations are left as they were');

$standby->stop;
done_testing();
