# format => 'clickhouse' under load, against the real server: two pgbench
# clients over several tables (a composite key, key changes, deletes,
# REPLICA IDENTITY FULL with a TOASTed column left unchanged by updates), a
# TRUNCATE in the middle, an initial snapshot, kill -9 of the worker while
# it runs, and ClickHouse stopped until the pipeline has retried a few
# times.  At the end SELECT ... FINAL WHERE _deleted = 0 of every target
# equals the source, value for value.  Then a worker exit between the 2xx
# and the checkpoint re-delivers a batch, seen twice in a target whose
# merges are stopped, once with FINAL.
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

my $node = ReplicantTest::new_node('chload', conf => 'restart_after_crash = on');
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE orders (id int PRIMARY KEY, note text NOT NULL, qty int NOT NULL, client int);
CREATE TABLE lines (o int, l bigint, amount numeric(12, 2), PRIMARY KEY (o, l));
CREATE SEQUENCE lines_moved START 1000000;
CREATE TABLE docs (id int PRIMARY KEY, body text, n int NOT NULL);
ALTER TABLE docs REPLICA IDENTITY FULL;
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE events (id bigserial PRIMARY KEY, client int, at timestamptz DEFAULT now());
CREATE PUBLICATION pub FOR TABLE orders, lines, docs, events;
INSERT INTO orders SELECT g, 'seed', 0, 0 FROM generate_series(1, 300) g;
INSERT INTO lines SELECT g % 20, g, g * 1.25 FROM generate_series(1, 200) g;
INSERT INTO docs SELECT g, repeat(md5(g::text), 5000), 0 FROM generate_series(1, 10) g;
});

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ddl', ARRAY['pub'], '$sink_url', format => 'clickhouse')");
$ch->query_ok($_, settings => { database => 'replica' })
  foreach split /\n(?=CREATE TABLE)/, $node->safe_psql('postgres', "SELECT replicant.sink_ddl('ddl')");
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ddl')");
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ch', ARRAY['pub'], '$sink_url', snapshot => 'initial',"
	  . " format => 'clickhouse', batch_max_transactions => 50)");

my $script = PostgreSQL::Test::Utils::tempdir() . '/load.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set k random(1, 400)
\set o random(0, 19)
\set d random(1, 10)
BEGIN;
INSERT INTO orders VALUES (:k, 'new', 1, :client_id)
    ON CONFLICT (id) DO UPDATE SET qty = orders.qty + 1, note = orders.note || 'u', client = :client_id;
DELETE FROM orders WHERE id = (:k * 7) % 400 + 1;
INSERT INTO lines VALUES (:o, :k, :k * 0.5) ON CONFLICT (o, l) DO UPDATE SET amount = lines.amount + 1;
UPDATE lines SET l = nextval('lines_moved') WHERE o = :o AND l = (:k * 3) % 400;
UPDATE docs SET n = n + 1 WHERE id = :d;
INSERT INTO events (client) VALUES (:client_id);
COMMIT;
});
sub start_load
{
	my ($seconds) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', '2', '-T', $seconds, '-R', '100', '--max-tries=50',
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

sub poll { return ReplicantTest::poll($node, $_[0], $_[1] // 120); }
sub status { return $node->safe_psql('postgres', "SELECT $_[0] FROM replicant.status WHERE pipeline = 'ch'"); }

my $load = start_load(6);
ok(poll("SELECT state = 'streaming' AND changes_delivered > 200 FROM replicant.status WHERE pipeline = 'ch'"),
	'the snapshot is delivered and the stream flows under load');

# kill -9 of the worker mid-run: the server restarts, and so does the load.
my $pid = status('worker_pid');
kill 'KILL', $pid;
ok(poll("SELECT coalesce(worker_pid, 0) NOT IN (0, $pid) FROM replicant.status WHERE pipeline = 'ch'"),
	'a new worker runs after kill -9 of the old one');
# The server's crash restart ended pgbench's connections: write on after it.
$load->finish;

# ClickHouse away: the pipeline retries, nothing is skipped.  It goes before
# the TRUNCATE: 18.16 restarted right after a TRUNCATE can bring the
# truncated rows back (README, ClickHouse), which is not replicant's to fix.
$ch->stop;
$load = start_load(6);
$node->safe_psql('postgres', 'TRUNCATE events');
$node->safe_psql('postgres', 'INSERT INTO events (client) VALUES (9); UPDATE docs SET n = n + 1');
my $retries = status('retries');
ok(poll("SELECT state = 'retrying' AND retries >= $retries + 3 FROM replicant.status WHERE pipeline = 'ch'"),
	'with ClickHouse stopped the pipeline retries');
$ch->restart;
$load->finish;
$node->safe_psql('postgres', 'UPDATE docs SET n = n + 1 WHERE id = 1');

# The numbers as numbers: ClickHouse prints 12.50 where PostgreSQL prints 12.5.
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

sub converges
{
	my ($table, $cols, $order) = @_;
	my ($got, $want);
	my $deadline = time() + 180;
	while (time() < $deadline)
	{
		$want = normalized(decode_json($node->safe_psql('postgres',
			"SET TimeZone = 'UTC'; SELECT coalesce(json_agg(json_build_object("
			  . join(', ', map { "'$_', $_" } split /, /, $cols)
			  . ") ORDER BY $order), '[]') FROM $table")));
		$got = normalized($ch->select_rows(
			"SELECT $cols FROM replica.$table FINAL WHERE _deleted = 0 ORDER BY $order"));
		last if $got eq $want;
		usleep(100_000);
	}
	is($got, $want, "$table: the target equals the source");
}

converges('orders', 'id, note, qty, client', 'id');
converges('lines', 'o, l, amount', 'o, l');
converges('docs', 'id, body, n', 'id');
converges('events', 'id, client, at', 'id');
cmp_ok($node->safe_psql('postgres', 'SELECT sum(n) FROM docs'), '>', 0,
	'docs were updated with their TOASTed body unchanged');

# A re-delivered batch changes nothing: the worker exits between ClickHouse's
# 2xx and the checkpoint (fault point after_ack), so the next worker sends the
# batch again.  With the target's merges stopped, ClickHouse keeps both
# copies: the raw count() shows the batch arrived twice, FINAL shows it once.
$ch->query_ok('SYSTEM STOP MERGES replica.events');
# The worker holds there and is terminated, which exits as the fault
# point's own exit does; a worker the launcher restarts before the reset has
# reached the postmaster holds too, instead of sending the batch a third time.
my $before_fault = status('worker_pid');
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres',
	"ALTER SYSTEM SET replicant.fault_point = 'after_ack:hold';\nSELECT pg_reload_conf();");
$node->safe_psql('postgres', 'INSERT INTO events (client) SELECT 7 FROM generate_series(1, 5)');
my $held = eval { $node->wait_for_log(qr/fault point "after_ack" reached, holding/, $log_offset) };
$node->safe_psql('postgres', "SELECT pg_terminate_backend($before_fault)") if $held;
my $exited = $held
  && poll("SELECT coalesce(worker_pid, 0) <> $before_fault FROM replicant.status WHERE pipeline = 'ch'");
$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point;\nSELECT pg_reload_conf();");
ok($exited, 'the worker exits after the 2xx, before the checkpoint');
ok($held, '... at the fault point');
my $copies;
foreach (1 .. 1200)
{
	$copies = $ch->select_rows('SELECT count() AS c FROM replica.events WHERE client = 7')->[0]{c};
	last if $copies >= 10;
	usleep(100_000);
}
is($copies, 10, 'the batch was delivered twice: two copies of each of its 5 rows');
is($ch->select_rows('SELECT count() AS c FROM replica.events FINAL WHERE client = 7')->[0]{c}, 5,
	'... and FINAL holds each row once');
converges('events', 'id, client, at', 'id');
is(status('last_error'), '', 'no error left');

$ch->stop;
done_testing();
