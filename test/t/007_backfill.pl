# Incremental backfills beside the live stream: a random-UUID-keyed table
# backfilled with each read method while a client updates and deletes its
# rows (a stale chunk row must never overwrite a newer change), a ctid
# backfill surviving VACUUM FULL, and snapshot => 'incremental'.
#
# versions: all (watermark messages and the primary key index, src/compat.h)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('backfill');
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), n int, note text);
	INSERT INTO events (n, note) SELECT g, md5(g::text) FROM generate_series(1, 50000) g;
	CREATE TABLE ordered (id bigint PRIMARY KEY, v text);
	INSERT INTO ordered SELECT g, md5(g::text) FROM generate_series(1, 30000) g;
	CREATE TABLE keyless (a int, b text);
	INSERT INTO keyless SELECT g, 'row ' || g FROM generate_series(1, 5000) g;
	CREATE TABLE readings (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), n int, at timestamptz);
	INSERT INTO readings (n, at) SELECT g, now() FROM generate_series(1, 20000) g;
	ANALYZE;
	CREATE PUBLICATION bf_pub FOR TABLE events, ordered, keyless, readings;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('bf', 'bf_pub', '$sink->{url}')");

# A client that keeps updating and deleting random rows of events.
my $script = PostgreSQL::Test::Utils::tempdir() . '/churn.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set r random(1, 100)
UPDATE events SET n = n + 1000000, note = 'updated' WHERE id = (SELECT id FROM events TABLESAMPLE SYSTEM (1) LIMIT 1);
DELETE FROM events WHERE id = (SELECT id FROM events TABLESAMPLE SYSTEM (1) LIMIT 1) AND :r <= 30;
});
sub churn
{
	my ($seconds) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', '1', '-T', $seconds, '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

# Stops the churn once the backfill it ran under is done (a transaction cut
# off rolls back whole), and waits until its backends are gone, so that the
# source no longer changes when it is compared with the sink.
sub stop_churn
{
	my ($churn) = @_;
	$churn->kill_kill(grace => 5);
	$node->poll_query_until('postgres', q{SELECT NOT EXISTS (
		SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgbench')});
	return;
}

sub backfill_done
{
	my ($id) = @_;
	return $node->poll_query_until('postgres',
		"SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id");
}

# The router: a random UUID key has no correlation, a serial one has.  A
# table whose updates can leave TOASTed columns unchanged is read by key
# whatever its order (block windows could miss a row such an update moved).
my $auto_readings = $node->safe_psql('postgres',
	"SELECT replicant.backfill('bf', 'readings')");
is($node->safe_psql('postgres', "SELECT mode FROM replicant.backfill_status WHERE id = $auto_readings"),
	'ctid', 'auto chooses block windows for an uncorrelated key');
ok(backfill_done($auto_readings), 'auto backfill of readings finishes');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['readings']),
	'readings at the sink equal the source');
my $auto_events = $node->safe_psql('postgres',
	"SELECT replicant.backfill('bf', 'events')");
is($node->safe_psql('postgres', "SELECT mode FROM replicant.backfill_status WHERE id = $auto_events"),
	'keyset', 'auto chooses keyset for an uncorrelated key beside a column that can be TOASTed');
my $churn = churn(15);
ok(backfill_done($auto_events), 'auto backfill of events finishes while rows change');
stop_churn($churn);
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['events']),
	'events at the sink equal the source after a backfill under updates and deletes');

my $auto_ordered = $node->safe_psql('postgres', "SELECT replicant.backfill('bf', 'ordered')");
is($node->safe_psql('postgres', "SELECT mode FROM replicant.backfill_status WHERE id = $auto_ordered"),
	'keyset', 'auto chooses keyset for a correlated key');
ok(backfill_done($auto_ordered), 'keyset backfill of ordered finishes');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['ordered']),
	'ordered at the sink equals the source');

# bitmap on a bigint key: sub-ranges in numeric order (as text, '10000'
# sorts before '9999' and the ranges would overlap), each row read once.
my $bitmap_ordered = $node->safe_psql('postgres',
	"SELECT replicant.backfill('bf', 'ordered', mode => 'bitmap')");
ok(backfill_done($bitmap_ordered), 'bitmap backfill of ordered finishes');
is($node->safe_psql('postgres',
		"SELECT cardinality(bounds) > 10 AND bounds::bigint[] = ARRAY(SELECT b FROM unnest(bounds::bigint[]) b ORDER BY b)"
		  . " FROM replicant.backfills WHERE id = $bitmap_ordered"),
	't', 'bitmap bounds are in the key type\'s order');
is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE id = $bitmap_ordered"),
	'30000', 'bitmap reads each of the 30,000 rows once');

# Each explicit mode on the churning table, against a fresh sink each time.
for my $mode ('keyset', 'bitmap', 'ctid')
{
	my $fresh = ReplicantTest::start_sink(name => "sink_$mode");
	$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('bf', sink_url => '$fresh->{url}')");
	my $id = $node->safe_psql('postgres', "SELECT replicant.backfill('bf', 'events', mode => '$mode')");
	$churn = churn(10);
	ok(backfill_done($id), "$mode backfill finishes under churn");
	stop_churn($churn);
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $fresh, ['events']),
		"$mode: events at a fresh sink equal the source (no stale overwrite)");
	$fresh->stop;
}
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('bf', sink_url => '$sink->{url}')");

# A key-less table can only be read by ctid.
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.backfill('bf', 'keyless', mode => 'keyset')");
like($err, qr/has no key, so it can only be read with mode "ctid"/, 'keyset refused without a key');
my $keyless = $node->safe_psql('postgres', "SELECT replicant.backfill('bf', 'keyless')");
ok(backfill_done($keyless), 'key-less table backfilled by ctid');

# VACUUM FULL during a ctid backfill: the table starts over, still correct.
my $slow = ReplicantTest::start_sink(name => 'slow', delay_ms => 100);
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('bf', sink_url => '$slow->{url}')");
$node->safe_psql('postgres', "DELETE FROM events WHERE n % 3 = 0");
my $vf = $node->safe_psql('postgres', "SELECT replicant.backfill('bf', 'events', mode => 'ctid')");
$node->poll_query_until('postgres',
	"SELECT rows_done > 0 FROM replicant.backfill_status WHERE id = $vf");
$node->safe_psql('postgres', 'VACUUM FULL events');
$slow->control({ clear => 1 });
ok(backfill_done($vf), 'ctid backfill finishes after VACUUM FULL');
ok($node->log_contains('was rewritten during its backfill'), 'the rewrite restarted the table');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $slow, ['events']),
	'events at the sink equal the source after VACUUM FULL');

# snapshot => 'incremental' backfills every published table of a new pipeline.
my $inc = ReplicantTest::start_sink(name => 'incremental');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('inc', 'bf_pub', '$inc->{url}', snapshot => 'incremental')");
ok($node->poll_query_until('postgres',
		"SELECT bool_and(state = 'done') AND count(*) = 4 FROM replicant.backfill_status WHERE pipeline = 'inc'"),
	'incremental snapshot backfills every table');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $inc, [qw(events ordered keyless readings)]),
	'incremental snapshot converges');
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'inc'"),
	'streaming', 'pipeline streams after its backfills');

done_testing();
