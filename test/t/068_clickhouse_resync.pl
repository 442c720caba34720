# A resync into real ClickHouse (format => 'clickhouse', issue #33 5(f)):
# each table's resync "last" marker is the sweep, an INSERT ... SELECT of a
# tombstone (_deleted = 1, version just below the new slot's consistent
# point) for every key whose FINAL row is older than that point; rows the
# resync read carry the point itself, stream changes later ones.  The
# source keeps writing (pgbench: inserts, updates, deletes, a key change)
# throughout, and rows are deleted while nothing streams them (ClickHouse
# down, or the slot dropped), which only the sweep removes.  Each case ends
# with SELECT ... FINAL WHERE _deleted = 0 of every target equal to the
# source, value for value:
#   (f) resync_pipeline() under load, ClickHouse down when it is asked;
#   (d) on_slot_loss => 'resync' after an operator's pg_drop_replication_slot;
#   (x) the worker killed (the server restarts) between a "last" marker's
#       sweep and its checkpoint (fault point snapshot_last_marker): the
#       marker, so the sweep, is sent again, and it is still equal.
# A key-less table (an insert-only MergeTree) is not swept.
#
# versions: all
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use ClickHouse;
use ReplicantTest;

ClickHouse::require_server();

my $ch = ClickHouse->start;
$ch->query_ok('CREATE DATABASE replica');
my $sink_url = "$ch->{url}?database=replica";

my $node = ReplicantTest::new_node('chresync',
	conf => "restart_after_crash = on\nreplicant.max_restart_delay = 2000");
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE items (id int PRIMARY KEY, note text NOT NULL, qty int NOT NULL, client int);
CREATE TABLE pairs (a int, b bigint, v text, PRIMARY KEY (a, b));
CREATE SEQUENCE pairs_moved START 1000000;
CREATE TABLE docs (id int, n int NOT NULL, t text);
ALTER TABLE docs REPLICA IDENTITY FULL;
CREATE TABLE log (client int, at int);
CREATE PUBLICATION pub FOR TABLE items, pairs, docs, log;
INSERT INTO items SELECT g, 'seed', 0, 0 FROM generate_series(1, 600) g;
INSERT INTO pairs SELECT g % 20, g, 'p' FROM generate_series(1, 300) g;
INSERT INTO docs SELECT g, 0, 'd' FROM generate_series(1, 60) g;
INSERT INTO log SELECT 0, g FROM generate_series(1, 5) g;
});

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch', ARRAY['pub'], '$sink_url', snapshot => 'initial',"
	  . " format => 'clickhouse', create_tables => true, on_slot_loss => 'resync',"
	  . " http_timeout_ms => 5000, connect_timeout_ms => 500, batch_max_transactions => 50)");

my $script = PostgreSQL::Test::Utils::tempdir() . '/load.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set k random(1, 300)
\set o random(0, 19)
\set d random(1, 80)
BEGIN;
INSERT INTO items VALUES (:k, 'new', 1, :client_id)
    ON CONFLICT (id) DO UPDATE SET qty = items.qty + 1, note = items.note || 'u', client = :client_id;
DELETE FROM items WHERE id = (:k * 7) % 300 + 1;
INSERT INTO pairs VALUES (:o, :k, 'n') ON CONFLICT (a, b) DO UPDATE SET v = pairs.v || 'u';
UPDATE pairs SET b = nextval('pairs_moved') WHERE a = :o AND b = (:k * 3) % 300;
UPDATE docs SET n = n + 1 WHERE id = :d;
COMMIT;
});

sub start_load
{
	my ($seconds) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', '2', '-T', $seconds, '-R', '50', '--max-tries=50',
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

sub poll { return ReplicantTest::poll($node, $_[0], $_[1] // 180); }

sub status
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(($_[0])::text, '<null>') FROM replicant.status WHERE pipeline = 'ch'");
}

# The numbers as numbers: ClickHouse quotes 64-bit integers.
sub normalized
{
	my ($rows) = @_;
	foreach my $row (@$rows)
	{
		foreach my $v (values %$row)
		{
			$v += 0 if defined $v && !ref $v && $v =~ /^-?\d+(\.\d+)?$/;
		}
	}
	return JSON::PP->new->canonical->encode($rows);
}

my %tables = (
	items => [ 'id, note, qty, client', 'id' ],
	pairs => [ 'a, b, v',               'a, b' ],
	docs  => [ 'id, n, t',              'id, n, t' ],);

# Every keyed target's FINAL rows equal the source (polled: the stream
# catches up).
sub converges
{
	my ($label) = @_;
	foreach my $table (sort keys %tables)
	{
		my ($cols, $order) = @{ $tables{$table} };
		my ($got, $want);
		my $deadline = time() + 180;
		while (time() < $deadline)
		{
			$want = normalized(decode_json($node->safe_psql('postgres',
				"SELECT coalesce(json_agg(json_build_object("
				  . join(', ', map { "'$_', $_" } split /, /, $cols)
				  . ") ORDER BY $order), '[]') FROM $table")));
			$got = normalized($ch->select_rows(
				"SELECT $cols FROM replica.$table FINAL WHERE _deleted = 0 ORDER BY $order"));
			last if $got eq $want;
			usleep(200_000);
		}
		is($got, $want, "$label: $table FINAL equals the source");
	}
}

# Rows ClickHouse holds that the source deletes now, while nothing streams
# them: their ids in items (between $lo and $hi, which the load never
# writes), and some rows of the other tables.
sub delete_unstreamed
{
	my ($lo, $hi) = @_;
	my $ids = $node->safe_psql('postgres',
		"WITH d AS (DELETE FROM items WHERE id BETWEEN $lo AND $hi AND id % 5 = 0 RETURNING id)"
		  . " SELECT string_agg(id::text, ' ') FROM d");
	$node->safe_psql('postgres', 'DELETE FROM pairs WHERE b % 5 = 0; DELETE FROM docs WHERE id % 5 = 0');
	return [ split / /, $ids ];
}

# The resync is over and the sweep removed the rows deleted in the gap.
sub expect_swept
{
	my ($label, $gap, $log_offset) = @_;
	ok($node->wait_for_log(qr/replicant pipeline "ch" finished its resync: it streams from ([0-9A-F]+)\/([0-9A-F]+)/,
			$log_offset),
		"$label: the resync finished");
	my ($hi, $lo) = slurp_file($node->logfile, $log_offset)
	  =~ /replicant pipeline "ch" finished its resync: it streams from ([0-9A-F]+)\/([0-9A-F]+)/;
	my $lost_to = hex($hi) * 2**32 + hex($lo);
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ch'"),
		"$label: streaming again");
	my $load = start_load(4);
	$load->finish;
	converges($label);
	my $left = $ch->select_rows('SELECT id FROM replica.items FINAL WHERE _deleted = 0 AND id IN ('
		  . join(',', @$gap) . ')');
	is(scalar(@$left), 0, "$label: no row deleted in the gap is left (of " . scalar(@$gap) . ')');
	my $tombstones = $ch->select_rows(
		'SELECT count() AS c FROM replica.items FINAL WHERE _deleted = 1 AND _version = '
		  . ($lost_to - 1) . ' AND id IN (' . join(',', @$gap) . ')')->[0]{c};
	is($tombstones, scalar(@$gap),
		"$label: each is a tombstone of the sweep, just below the consistent point");
	is(status('last_error'), '<null>', "$label: no error left");
	return $lost_to;
}

my $load = start_load(5);
ok(poll("SELECT state = 'streaming' AND changes_delivered > 100 FROM replicant.status WHERE pipeline = 'ch'"),
	'the initial snapshot is delivered and the stream flows under load');
$load->finish;
converges('before any resync');

# ---- (f) resync_pipeline under load -------------------------------------------
{
	my $label = '(f) resync_pipeline';
	$ch->stop;
	$load = start_load(8);
	my $gap = delete_unstreamed(301, 400);
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'ch'"),
		"$label: retrying while ClickHouse is down");
	my $log_offset = -s $node->logfile;
	my $pid = status('worker_pid');
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('ch')");
	# The worker that decoded the gap's deletes is gone before ClickHouse is back.
	ok(poll("SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status WHERE pipeline = 'ch'"),
		"$label: the streaming worker made way for the resync");
	$ch->restart;
	$load->finish;
	expect_swept($label, $gap, $log_offset);
	is($ch->select_rows('SELECT count() AS c FROM replica.log')->[0]{c}, 10,
		"$label: the key-less table (insert-only) is not swept: its rows are there twice");
}

# ---- (d) on_slot_loss => 'resync' after pg_drop_replication_slot ------------
{
	my $label = '(d) slot dropped';
	my $slot = status('slot_name');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('ch')");
	ok(poll("SELECT worker_pid IS NULL FROM replicant.status WHERE pipeline = 'ch'"),
		"$label: the worker is gone");
	$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('$slot')");
	my $gap = delete_unstreamed(401, 500);
	$load = start_load(6);
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('ch')");
	$load->finish;
	ok($node->wait_for_log(qr/replicant pipeline "ch" lost its replication slot and resyncs/, $log_offset),
		"$label: the pipeline resyncs");
	expect_swept($label, $gap, $log_offset);
}

# ---- (x) killed between a sweep and its checkpoint ----------------------------
# The worker holds after a "last" marker was answered (its sweep done) and
# before it is recorded; killed there (the server restarts), the restarted
# worker sends the marker again: its sweep finds nothing more to delete.
{
	my $label = '(x) killed after a sweep';
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET replicant.fault_point = 'snapshot_last_marker:hold'; SELECT pg_reload_conf()");
	$ch->stop;
	my $gap = delete_unstreamed(501, 600);
	my $pid = status('worker_pid');
	$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('ch')");
	ok(poll("SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status WHERE pipeline = 'ch'"),
		"$label: the streaming worker made way for the resync");
	$ch->restart;
	ok($node->wait_for_log(qr/fault point "snapshot_last_marker" reached, holding/, $log_offset),
		"$label: the worker holds after a sweep was answered");
	is(status('state'), 'resyncing', "$label: the resync is not over");
	kill 'KILL', status('worker_pid');
	my $after = -s $node->logfile;
	ok($node->wait_for_log(qr/fault point "snapshot_last_marker" reached, holding/, $after),
		"$label: after the server's restart the marker is sent again");
	# The held worker goes on once the setting changes.
	$node->safe_psql('postgres',
		'ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()');
	expect_swept($label, $gap, $after);
}

$ch->stop;
done_testing();
