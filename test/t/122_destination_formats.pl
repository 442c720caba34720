# One pipeline, three destinations of three formats (issue #34, item 5): the
# replicant format to reference sink A, CloudEvents to reference sink B
# (every request parsed and validated by the official npm SDK, its events
# applied by key as a sink would), and format 'clickhouse' to a private
# ClickHouse server, under a seeded random workload: inserts, updates,
# key changes (a composite key too), deletes, multi-row statements and
# multi-statement transactions (some rolled back) over four tables, one of
# them REPLICA IDENTITY FULL with a large TOASTed column that updates and
# key changes mostly leave untouched.
#
#   B is added while the pipeline streams (a third format beside two, a
#     transaction open across the call): it gets exactly the transactions
#     that commit after the call
#   A answers 503 for a while, is retried, recovers
#   B answers 400: B halts alone while A and ClickHouse stream on;
#     resume_pipeline('p', 'b') catches it up
#   a backfill of every table runs while the workload writes: its chunks
#     reach A, B and ClickHouse, each in its own format, and bring the rows
#     written before the pipeline existed; one chunk is held in its window
#     while its rows are updated with the body left out, so A and B get those
#     rows as reads ahead of the update, each in its format
#   the worker is killed (kill -9, the server restarts) with a backlog and
#     writes in flight
#
# At the end each destination equals the source: A's rows (the reference
# sink), B's events applied in arrival order by key with the reference
# sink's own code and rules (effect-once by commit LSN), and ClickHouse's
# SELECT ... FINAL WHERE _deleted = 0 of every table, value for value.  No
# commit is applied twice (A's txlog; B's applier sees a re-delivered
# commit carry the same events), none is lost, A and B got exactly the
# transactions they should have (by xid), at most one batch per destination
# was sent again after the crash, and each sink only ever got its own
# format.
#
# The seed is printed; REPLICANT_SEED=<n> repeats the workload.
# versions: all (issue #34 asks its tests on 15, 17 and 18)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use IPC::Run;
use JSON::PP;
use Encode ();
use MIME::Base64;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use ClickHouse;
use ReplicantTest;

ClickHouse::require_server();
ReplicantTest::require_node('cloudevents');

my $seed = $ENV{REPLICANT_SEED} // int(rand(2**31));
diag("seed $seed (REPLICANT_SEED=$seed repeats the workload)");
srand($seed);
my $started = time();

my $ch = ClickHouse->start;
$ch->query_ok('CREATE DATABASE replica');

my $node = ReplicantTest::new_node('destination_formats',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b', keep_bodies => 1);
my $dir = PostgreSQL::Test::Utils::tempdir();

my @TABLES = qw(acct item doc txns);
# Seeded before the pipeline exists: only a backfill brings these rows.
my ($SEED_ACCT, $SEED_ITEM_A, $SEED_ITEM_B, $SEED_DOC) = (800, 30, 15, 24);
$node->safe_psql('postgres', qq{
CREATE EXTENSION replicant;
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12, 2) NOT NULL, note text);
CREATE TABLE item (a int, b text, qty bigint NOT NULL, label text, PRIMARY KEY (a, b));
CREATE TABLE doc (id int PRIMARY KEY, rev int NOT NULL, title text, body text NOT NULL);
ALTER TABLE doc REPLICA IDENTITY FULL;
ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL;
-- one row per workload transaction: which commits each destination got
CREATE TABLE txns (id bigserial PRIMARY KEY,
    xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint, seg int NOT NULL);
CREATE PUBLICATION pub FOR TABLE acct, item, doc, txns;
INSERT INTO acct SELECT g, 'seed ' || g, g * 1.25, CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' || g END
  FROM generate_series(1, $SEED_ACCT) g;
INSERT INTO item SELECT a, 'k' || b, a * 100 + b, NULL
  FROM generate_series(1, $SEED_ITEM_A) a, generate_series(1, $SEED_ITEM_B) b;
INSERT INTO doc SELECT g, 0, 'doc ' || g, repeat(md5('seed' || g), 300) FROM generate_series(1, $SEED_DOC) g;
});

# ---- the workload -----------------------------------------------------------
# Transactions generated from the seed.  Keys are never used twice (inserts
# and key changes take fresh ones), so that a segment cut short by the crash
# leaves every later statement valid: an update or delete of a key that is
# gone changes nothing.
my %live = (
	acct => { map { $_ => 1 } 1 .. $SEED_ACCT },
	item => {
		map {
			my $i = $_;
			map { ("$i|k$_" => 1) } 1 .. $SEED_ITEM_B
		} 1 .. $SEED_ITEM_A
	},
	doc => { map { $_ => 1 } 1 .. $SEED_DOC });
my $fresh = 100_000;
my $segment_no = 0;
my @TEXTS = ('plain', "O'Brien", 'say "hi"', 'back\\slash', "tab\there", "two\nlines", '', '{"not": "json"}');
push @TEXTS, Encode::encode('UTF-8', "\x{e9} \x{fc} \x{df} \x{65e5}\x{672c} \x{2603}")
  if $node->safe_psql('postgres', 'SHOW server_encoding') eq 'UTF8';

sub lit
{
	my ($v) = @_;
	return 'NULL' unless defined $v;
	$v =~ s/'/''/g;
	return "'$v'";
}
sub text_value { return $TEXTS[ int(rand(@TEXTS)) ]; }
sub maybe_null { return rand() < 0.2 ? undef : text_value(); }

# A live key of the table (sorted: the same choice for the same seed).
sub pick
{
	my ($table) = @_;
	my @keys = sort keys %{ $live{$table} };
	return undef unless @keys;
	return $keys[ int(rand(@keys)) ];
}

sub body_sql
{
	my $tag = $fresh++;
	return "repeat(md5('body$tag'), " . (250 + int(rand(150))) . ')';
}

# [weight, statement]: each returns one statement, '' when it has no row to
# change, and keeps %live as the statement leaves the rows.
my @OPS = (
	# acct: inserts (one row, several), updates (one row, several), key
	# changes, deletes
	[
		3,
		sub {
			my $id = $fresh++;
			$live{acct}{$id} = 1;
			return sprintf("INSERT INTO acct VALUES (%d, %s, %.2f, %s);",
				$id, lit(text_value()), rand(1000), lit(maybe_null()));
		}
	],
	[
		1,
		sub {
			my ($from, $to) = ($fresh, $fresh + 1 + int(rand(7)));
			$fresh = $to + 1;
			$live{acct}{$_} = 1 foreach $from .. $to;
			return "INSERT INTO acct SELECT g, 'bulk', g * 0.5, NULL FROM generate_series($from, $to) g;";
		}
	],
	[
		4,
		sub {
			my $k = pick('acct') // return '';
			return sprintf("UPDATE acct SET balance = balance + %.2f, note = %s WHERE id = %d;",
				rand(50), lit(maybe_null()), $k);
		}
	],
	[
		1,
		sub {
			my @k = grep { defined } map { pick('acct') } 1 .. 4;
			return @k ? 'UPDATE acct SET balance = balance - 1 WHERE id IN (' . join(', ', @k) . ');' : '';
		}
	],
	[
		2,
		sub {
			my $k = pick('acct') // return '';
			my $n = $fresh++;
			delete $live{acct}{$k};
			$live{acct}{$n} = 1;
			return "UPDATE acct SET id = $n WHERE id = $k;";
		}
	],
	[
		2,
		sub {
			my $k = pick('acct') // return '';
			delete $live{acct}{$k};
			return "DELETE FROM acct WHERE id = $k;";
		}
	],
	# item, a composite key: inserts, updates, key changes (one column or
	# both), deletes
	[
		3,
		sub {
			my ($ka, $kb) = (1 + int(rand(30)), 'n' . $fresh++);
			$live{item}{"$ka|$kb"} = 1;
			return sprintf("INSERT INTO item VALUES (%d, '%s', %d, %s);",
				$ka, $kb, int(rand(1e9)), lit(maybe_null()));
		}
	],
	[
		3,
		sub {
			my ($ka, $kb) = split /\|/, (pick('item') // return '');
			return sprintf("UPDATE item SET qty = qty + %d, label = %s WHERE a = %d AND b = '%s';",
				int(rand(100)), lit(maybe_null()), $ka, $kb);
		}
	],
	[
		2,
		sub {
			my $k = pick('item') // return '';
			my ($ka, $kb) = split /\|/, $k;
			my ($na, $nb) = (rand() < 0.5 ? $ka : 1 + int(rand(30)), 'n' . $fresh++);
			delete $live{item}{$k};
			$live{item}{"$na|$nb"} = 1;
			return "UPDATE item SET a = $na, b = '$nb' WHERE a = $ka AND b = '$kb';";
		}
	],
	[
		1,
		sub {
			my $k = pick('item') // return '';
			my ($ka, $kb) = split /\|/, $k;
			delete $live{item}{$k};
			return "DELETE FROM item WHERE a = $ka AND b = '$kb';";
		}
	],
	# doc: mostly updates and key changes that leave the TOASTed body
	# untouched; the body rewritten now and then; inserts, deletes
	[
		4,
		sub {
			my $k = pick('doc') // return '';
			return "UPDATE doc SET rev = rev + 1 WHERE id = $k;";
		}
	],
	[
		2,
		sub {
			my $k = pick('doc') // return '';
			return 'UPDATE doc SET title = ' . lit(maybe_null()) . ", rev = rev + 1 WHERE id = $k;";
		}
	],
	[
		1,
		sub {
			my $k = pick('doc') // return '';
			my $n = $fresh++;
			delete $live{doc}{$k};
			$live{doc}{$n} = 1;
			return "UPDATE doc SET id = $n WHERE id = $k;";
		}
	],
	[
		1,
		sub {
			my $k = pick('doc') // return '';
			return 'UPDATE doc SET body = ' . body_sql() . ", rev = rev + 1 WHERE id = $k;";
		}
	],
	[
		1,
		sub {
			my $id = $fresh++;
			$live{doc}{$id} = 1;
			return "INSERT INTO doc VALUES ($id, 0, " . lit(maybe_null()) . ', ' . body_sql() . ');';
		}
	],
	[
		1,
		sub {
			return '' if keys %{ $live{doc} } < 10;
			my $k = pick('doc');
			delete $live{doc}{$k};
			return "DELETE FROM doc WHERE id = $k;";
		}
	],
);
my $total_weight = 0;
$total_weight += $_->[0] foreach @OPS;

sub random_op
{
	my $r = rand($total_weight);
	foreach my $op (@OPS)
	{
		return $op->[1]->() if ($r -= $op->[0]) < 0;
	}
	return $OPS[-1][1]->();
}

# $count transactions of 1 to 5 statements each, one in 20 rolled back;
# with pace, a short pg_sleep between them (a background writer, not a burst).
sub segment
{
	my ($count, %opts) = @_;
	my $seg = ++$segment_no;
	my $sql = '';
	foreach (1 .. $count)
	{
		my %before = map { $_ => { %{ $live{$_} } } } keys %live;
		my $body = join("\n", grep { $_ ne '' } map { random_op() } 1 .. 1 + int(rand(5)));
		my $rollback = rand() < 0.05;
		%live = %before if $rollback;
		$sql .= "BEGIN;\n$body\nINSERT INTO txns (seg) VALUES ($seg);\n" . ($rollback ? 'ROLLBACK' : 'COMMIT') . ";\n";
		$sql .= "SELECT pg_sleep(0.003);\n" if $opts{pace};
	}
	return $sql;
}

sub run_segment
{
	my ($count) = @_;
	$node->safe_psql('postgres', segment($count));
	return;
}

# A segment in the background: psql, its output in files, as a handle.
sub start_segment
{
	my ($count) = @_;
	my $file = "$dir/segment" . ($segment_no + 1);
	PostgreSQL::Test::Utils::append_to_file("$file.sql", segment($count, pace => 1));
	return IPC::Run::start(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $node->host, '-p', $node->port,
			'-d', 'postgres', '-f', "$file.sql"
		],
		'<', '/dev/null', '>', "$file.out", '2>', "$file.err");
}

sub finish_segment
{
	my ($h) = @_;
	return eval { $h->finish; 1 } && $h->result == 0;
}

# ---- helpers ----------------------------------------------------------------
sub poll { return ReplicantTest::poll($node, $_[0], $_[1] // 120); }

sub delivered
{
	return poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)");
}

sub dest
{
	my ($name, $column) = @_;
	return $node->safe_psql('postgres',
		"SELECT $column FROM replicant.destination_status WHERE pipeline = 'p' AND destination = '$name'");
}

sub dest_state_is
{
	my ($name, $state) = @_;
	return poll("SELECT state = '$state' FROM replicant.destination_status WHERE pipeline = 'p' AND destination = '$name'");
}

# B's requests as the sink kept them (2xx only), decoded.
sub b_requests
{
	return [ map { { %$_, events => decode_json(decode_base64($_->{body_base64})) } } @{ $sink_b->raw_bodies } ];
}

# The xids of the transactions whose changes B received in its stream.
sub b_stream_xids
{
	my %xids;
	foreach my $r (@{ b_requests() })
	{
		$xids{ $_->{xid} } = 1 foreach grep { defined $_->{xid} } @{ $r->{events} };
	}
	return join(',', sort { $a <=> $b } keys %xids);
}

sub sorted_list { return join(',', sort { $a <=> $b } split /,/, $_[0]); }

# The xids of the committed workload transactions that match $where.
sub source_xids
{
	my ($where) = @_;
	return sorted_list($node->safe_psql('postgres',
		"SELECT coalesce(string_agg(xid::text, ','), '') FROM (SELECT DISTINCT xid FROM txns WHERE $where) s"));
}

sub phase { note(sprintf('%.1f s: %s', time() - $started, $_[0])); }

# ---- the pipeline: A and ClickHouse, then B while streaming ----------------
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}', destination => 'a',"
	  . " batch_max_transactions => 20, batch_max_bytes => 32768)");
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'ch', '$ch->{url}?database=replica', format => 'clickhouse',"
	  . " create_tables => true, batch_max_transactions => 50)");
ok(dest_state_is('a', 'streaming') && dest_state_is('ch', 'streaming'), 'a and ch stream');

run_segment(40);
ok(delivered(), 'the first writes are delivered to a and ch');
phase('streaming');

# B, in the third format, added while A and ClickHouse stream: a writer
# commits before, across and after the call.
my $writer = $node->background_psql('postgres');
$writer->query_safe('BEGIN');
my $open_id = $fresh++;
$writer->query_safe("INSERT INTO acct VALUES ($open_id, 'open across the add', 1, NULL)");
$writer->query_safe('INSERT INTO txns (seg) VALUES (0)');
my $open_xid = $writer->query_safe('SELECT pg_current_xact_id()');
chomp $open_xid;
run_segment(15);
my $before = $node->safe_psql('postgres', 'SELECT max(id) FROM txns');
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'b', '$sink_b->{url}', format => 'cloudevents',"
	  . ' batch_max_transactions => 7)');
$writer->query_safe('COMMIT');
$writer->quit;
$live{acct}{$open_id} = 1;
run_segment(25);
ok(delivered(), 'delivered to all three after the add');
my $b_from = "id > $before OR xid = $open_xid";
is(b_stream_xids(), source_xids($b_from),
	'b got exactly the transactions committed after add_destination (the open one too)');
is(dest('b', 'format') . ' ' . dest('ch', 'format') . ' ' . dest('a', 'format'), 'cloudevents clickhouse replicant',
	'destination_status: three formats');
like(join(' ', map { $_->{webhook_id} } @{ $sink_b->raw_bodies }), qr/^(p\.b-\S+\s*)+$/,
	'b\'s webhook-ids are p.b-...');
phase('b added');

# ---- A fails for a while ------------------------------------------------------
my $a_retries = dest('a', 'retries');
$sink_a->control({ clear => 1, fail_status => 503 });
run_segment(30);
ok(poll("SELECT retries >= $a_retries + 3 FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'a'"),
	'a answers 503: its requests are retried');
$sink_a->control({ clear => 1 });
ok(delivered(), 'a recovered: delivered to all three');
phase('a recovered');

# ---- B refuses: it halts alone -------------------------------------------------
$sink_b->control({ clear => 1, fail_status => 400 });
run_segment(20);
ok(dest_state_is('b', 'halted'), 'a 400 halts b');
like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.destinations WHERE name = 'b'"),
	qr/^sink rejected batch: HTTP 400/, 'the halt is recorded on b');
run_segment(20);
my $last_txn = $node->safe_psql('postgres', 'SELECT max(id) FROM txns');
my $a_has_last = 0;
foreach (1 .. 600)
{
	last if ($a_has_last = ($sink_a->dump('public.txns') =~ /"id":$last_txn,/));
	usleep(200_000);
}
ok($a_has_last, 'a streams on while b is halted');
my $ch_has_last = 0;
foreach (1 .. 600)
{
	last if ($ch_has_last = $ch->select_rows("SELECT count() AS n FROM replica.txns FINAL WHERE id = $last_txn")->[0]{n});
	usleep(200_000);
}
ok($ch_has_last, 'ClickHouse streams on while b is halted');
is(dest('b', 'state'), 'halted', 'b is still halted');
$sink_b->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('p', 'b')");
ok(dest_state_is('b', 'streaming'), 'b resumed');
run_segment(10);
ok(delivered(), 'b caught up');
phase('b resumed');

# ---- a backfill of every table while the workload writes -------------------
# doc's first chunk is held inside its window (between its low watermark
# and its read) while its first rows are updated, their body left out: the
# chunk keeps those rows and sends them, in each destination's format, ahead
# of the update (ClickHouse takes the body from the old row instead).
sub fault_point { return ReplicantTest::set_fault_point($node, $_[0]); }
# All four are planned in one transaction (each call makes the worker start
# again when it commits, which would read a held chunk again), doc first:
# backfills run in the order of their ids.
my $offset = -s $node->logfile;
fault_point('backfill_window:hold');
my $bg = start_segment(60);
my @backfills = split /\n/, $node->safe_psql('postgres',
	join("\n", 'BEGIN;', (map { "SELECT replicant.backfill('p', '$_');" } 'doc', grep { $_ ne 'doc' } @TABLES), 'COMMIT;'));
$node->wait_for_log(qr/fault point "backfill_window" reached, holding/, $offset);
$node->safe_psql('postgres', q{
BEGIN;
UPDATE doc SET rev = rev + 1 WHERE id IN (SELECT id FROM doc ORDER BY id LIMIT 5);
INSERT INTO txns (seg) VALUES (-1);
COMMIT;
});
fault_point(undef);
my $backfill_ids = join(',', @backfills);
my $backfills_done = "SELECT count(*) = " . scalar(@backfills)
  . " FROM replicant.backfill_status WHERE state = 'done' AND id IN ($backfill_ids)";
# The workload writes while the backfills run, for at most 20 segments: a
# chunk completes only when decoding reaches its high watermark, so a writer
# that outpaces the worker on a loaded machine would hold the backfills off
# for as long as it writes.
my $backfill_states = "SELECT string_agg(state, ',' ORDER BY id) FROM replicant.backfill_status WHERE id IN ($backfill_ids)";
my ($during, $bg_ok) = (1, 1);
my $deadline = time() + 300;
until ($during >= 20 || time() > $deadline || $node->safe_psql('postgres', $backfills_done) eq 't')
{
	if (!$bg->pumpable)
	{
		$bg_ok &&= finish_segment($bg);
		$bg = start_segment(40);
		$during++;
	}
	usleep(100_000);
}
my $states_then = $node->safe_psql('postgres', $backfill_states);
poll($backfills_done, 300);
is($node->safe_psql('postgres', $backfill_states), join(',', ('done') x @backfills), 'the backfills are done');
$bg_ok &&= finish_segment($bg);
ok($bg_ok, "the workload wrote during the backfills ($during segments, until they were $states_then), without an error");
ok(delivered(), 'delivered after the backfills');
phase('backfilled');

# ---- the worker killed with a backlog and writes in flight -----------------
# A answers slowly, so the destinations fall behind the writer.
my $a_delivered = dest('a', 'transactions_delivered');
$sink_a->control({ clear => 1, delay_ms => 300 });
$bg = start_segment(200);
ok(poll("SELECT transactions_delivered > $a_delivered AND pg_current_wal_lsn() - checkpoint_lsn > 65536"
		  . " FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'a'"),
	'mid-stream: a delivers, 64 kB of WAL behind the writer');
my $worker = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ok($worker =~ /^\d+$/, 'the worker runs');
note('the writer ' . ($bg->pumpable ? 'still writes' : 'is done') . ' at the kill');
ReplicantTest::kill_worker($node, $worker);
eval { $bg->finish; };    # the restart ended its connection
$sink_a->control({ clear => 1 });
ok(poll("SELECT coalesce(worker_pid, 0) NOT IN (0, $worker) FROM replicant.status WHERE pipeline = 'p'"),
	'a new worker runs after the crash');
run_segment(20);
ok(delivered(), 'delivered after the crash');
phase('crashed and recovered');

# ---- each destination equals the source --------------------------------------
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ map { "public.$_" } @TABLES ], 120),
	'a equals the source');
my $a_stats = $sink_a->stats;
is($a_stats->{batches_applied}, scalar(@{ $a_stats->{accepted} }),
	'every request a accepted was in replicant\'s format (no CloudEvents array)');
my %a_lsns;
$a_lsns{ $_->{commit_lsn} }++ foreach @{ $sink_a->txlog };
is(scalar(grep { $_ > 1 } values %a_lsns), 0, 'a applied no commit twice');
is(sorted_list(join(',', map { $_->{xid} } @{ $sink_a->txlog })), source_xids('true'),
	'a applied every committed workload transaction, once');
note("a: $a_stats->{duplicate_transactions} commits sent again");
cmp_ok($a_stats->{duplicate_transactions}, '<=', 20, 'a: at most one batch (20 transactions) sent again after the crash');
my %a_backfills = map { ($_->{snapshot}{backfill_id} // '') => 1 } grep { $_->{kind} eq 'snapshot' } @{ $a_stats->{accepted} };
is(scalar(grep { $a_backfills{$_} } @backfills), scalar(@backfills), 'a got chunks of every backfill');

# B: every request through the SDK, then applied as the reference sink
# applies replicant's format, with its rules.
my $raw_b = ReplicantTest::run_sink_script([ 'bodies', '--raw', '--db', $sink_b->{db} ]);
my @b_requests = map { decode_json($_) } split /\n/, $raw_b;
my @checked = map { decode_json($_) } split /\n/, ReplicantTest::run_node('cloudevents-check.mjs', [], $raw_b);
my @sdk_errors = grep { $_->{error} } @checked;
is(scalar(@sdk_errors), 0, 'the SDK parses and validates every request b got') or diag(explain([ @sdk_errors[ 0 .. 4 ] ]));
is(scalar(grep { $_->{headers}{'content-type'} eq 'application/cloudevents-batch+json' } @b_requests),
	scalar(@b_requests), 'every request b got is application/cloudevents-batch+json');

my $applier = "$dir/apply_cloudevents.py";
PostgreSQL::Test::Utils::append_to_file($applier, <<'PY');
# Applies CloudEvents requests (bodies --raw lines on stdin, in arrival
# order) to a reference sink database with the reference sink's own code:
# a request with stream events is a batch of transactions (effect-once by
# commit LSN, as for replicant's format), a read without a commit in it is
# a chunk row kept ahead of its transaction's next change; a request of
# reads alone is a snapshot batch.  Prints what it saw as JSON.
import base64, importlib.util, json, sys, threading
spec = importlib.util.spec_from_file_location("replicant_sink", sys.argv[1])
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)
db = rs.open_db(sys.argv[2])
lock = threading.Lock()
report = {"events": 0, "stream_requests": 0, "snapshot_requests": 0, "reads": 0, "kept_reads": 0, "backfill_ids": [],
          "redelivered": [], "xids": [], "problems": []}
content, backfills, watermark = {}, set(), -1
for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    wid = request["webhook_id"]
    events = rs.loads(base64.b64decode(request["body_base64"]).decode("utf-8"))
    if not isinstance(events, list):
        report["problems"].append("%s: not an array" % wid)
        continue
    report["events"] += len(events)
    stream = any("commitlsn" in e for e in events)
    txns, pending, reads = [], [], []
    for e in events:
        kind = e["type"]
        if kind in ("io.replicant.snapshot.begin", "io.replicant.snapshot.end"):
            if stream:
                report["problems"].append("%s: a snapshot marker among stream events" % wid)
            continue
        if kind == "io.replicant.read":
            backfills.add(str(e["backfillid"]))
            (pending if stream else reads).append(e)
            continue
        if "commitlsn" not in e or kind == "io.replicant.message":
            report["problems"].append("%s: unexpected %s event" % (wid, kind))
            continue
        lsn = int(e["commitlsn"])
        if not txns or txns[-1]["lsn"] != lsn:
            if txns and lsn < txns[-1]["lsn"]:
                report["problems"].append("%s: commit LSN %d after %d" % (wid, lsn, txns[-1]["lsn"]))
            txns.append({"lsn": lsn, "xid": e["xid"], "events": []})
        txns[-1]["events"].extend(pending + [e])
        report["kept_reads"] += len(pending)
        pending = []
    if pending:
        report["problems"].append("%s: a read after the last change" % wid)
    with rs.transaction(db, lock):
        if reads:
            report["snapshot_requests"] += 1
            report["reads"] += len(reads)
            rs.apply_batch(db, {"pipeline": "p", "kind": "snapshot",
                                "changes": [e["data"] for e in reads]}, wid, 0.0)
        if txns:
            report["stream_requests"] += 1
            for t in txns:
                canon = rs.canon([[e["id"], e["type"], e["data"]] for e in t["events"]])
                if t["lsn"] <= watermark:
                    if t["lsn"] not in content:
                        report["problems"].append("%s: commit LSN %d at or below the watermark %d, never applied"
                                                  % (wid, t["lsn"], watermark))
                    elif content[t["lsn"]] != canon:
                        report["problems"].append("%s: commit LSN %d sent again with other events" % (wid, t["lsn"]))
                    else:
                        report["redelivered"].append(t["lsn"])
                    continue
                content[t["lsn"]] = canon
                watermark = t["lsn"]
                report["xids"].append(str(t["xid"]))
            rs.apply_batch(db, {"pipeline": "p", "kind": "changes", "transactions": [
                {"commit_lsn": t["lsn"], "xid": t["xid"], "changes": [e["data"] for e in t["events"]]}
                for t in txns]}, wid, 0.0)
report["backfill_ids"] = sorted(backfills)
print(json.dumps(report))
PY
my $b_db = "$dir/b_applied.db";
my ($out, $err) = ('', '');
IPC::Run::run([ $ReplicantTest::PYTHON, $applier, $ReplicantTest::SINK_SCRIPT, $b_db ],
	'<', \$raw_b, '>', \$out, '2>', \$err)
  or die "applying b's events failed: $err";
my $b = decode_json($out);
note("b: $b->{stream_requests} stream requests, $b->{snapshot_requests} of backfill rows ($b->{reads} reads),"
	  . " $b->{kept_reads} chunk rows kept ahead of a change, " . scalar(@{ $b->{redelivered} }) . ' commits sent again');
is(scalar(@checked), $b->{events}, "the SDK sees every event ($b->{events})");
is(join("\n", @{ $b->{problems} }), '', 'b: commits in order, none lost, one sent again carries the same events');
is(sorted_list(join(',', @{ $b->{xids} })), source_xids($b_from),
	'b applied every transaction committed after its add, once');
cmp_ok($b->{kept_reads}, '>', 0, 'b: rows of the held chunk came as read events ahead of their update');
cmp_ok(scalar(@{ $b->{redelivered} }), '<=', 7, 'b: at most one batch (7 transactions) sent again after the crash');
my %b_backfills = map { $_ => 1 } @{ $b->{backfill_ids} };
is(scalar(grep { $b_backfills{$_} } @backfills), scalar(@backfills), 'b got read events of every backfill');
foreach my $table (@TABLES)
{
	my $source = ReplicantTest::source_rows($node, 'postgres', "public.$table");
	my $got = ReplicantTest::run_sink_script([ 'dump', '--db', $b_db, '--table', "public.$table" ]);
	ok($got eq $source, "b: the CloudEvents applied by key equal the source: $table")
	  or diag(sprintf('source has %d rows, b %d', scalar($source =~ tr/\n//), scalar($got =~ tr/\n//)));
}

# ClickHouse: FINAL, value for value (numbers as numbers, ClickHouse prints
# 12.5 where PostgreSQL prints 12.50; the body by its md5), rows sorted here
# (the two servers' text orders may differ).
sub normalized
{
	my ($rows) = @_;
	my $json = JSON::PP->new->canonical;
	foreach my $row (@$rows)
	{
		foreach my $v (values %$row)
		{
			$v += 0 if defined $v && !ref $v && $v =~ /^-?\d+(\.\d+)?$/;
		}
	}
	return join("\n", sort map { $json->encode($_) } @$rows);
}

sub converges
{
	my ($table, $columns, $order) = @_;
	my ($got, $want);
	my $until = time() + 120;
	while (1)
	{
		$want = normalized(decode_json($node->safe_psql('postgres',
			"SELECT coalesce(json_agg(json_build_object("
			  . join(', ', map { "'$_->[0]', $_->[1]" } @$columns)
			  . ") ORDER BY $order), '[]') FROM $table")));
		$got = normalized($ch->select_rows(
			'SELECT ' . join(', ', map { "$_->[2] AS $_->[0]" } @$columns)
			  . " FROM replica.$table FINAL WHERE _deleted = 0 ORDER BY $order"));
		last if $got eq $want || time() > $until;
		usleep(200_000);
	}
	ok($got eq $want, "ClickHouse: FINAL equals the source: $table")
	  or diag("source: " . substr($want, 0, 2000) . "\nClickHouse: " . substr($got, 0, 2000));
}
converges('acct', [ map { [ $_, $_, $_ ] } qw(id owner balance note) ], 'id');
converges('item', [ map { [ $_, $_, $_ ] } qw(a b qty label) ], 'a, b');
converges('doc', [ (map { [ $_, $_, $_ ] } qw(id rev title)), [ 'body_md5', 'md5(body)', 'lower(hex(MD5(body)))' ] ], 'id');
converges('txns', [ map { [ $_, $_, $_ ] } qw(id xid seg) ], 'id');
my $seeded = $node->safe_psql('postgres', "SELECT count(*) FROM acct WHERE id <= $SEED_ACCT");
cmp_ok($seeded, '>', 0, 'some rows written before the pipeline are left');
is($ch->select_rows("SELECT count() AS n FROM replica.acct FINAL WHERE _deleted = 0 AND id <= $SEED_ACCT")->[0]{n},
	$seeded, 'ClickHouse has the rows only the backfill carried');

is($node->safe_psql('postgres',
		"SELECT string_agg(destination || ' ' || state, ', ' ORDER BY destination) FROM replicant.destination_status WHERE pipeline = 'p'"),
	'a streaming, b streaming, ch streaming', 'every destination streams');
phase('compared');

# ---- ch resyncs alone (resync_pipeline(p, ch)) while the workload writes:
# every table is read again for it beside a's and b's stream, and its last
# markers sweep (by version) what it holds that was not read or streamed
# again: here a row the source never had.  Not in a table whose
# publication publishes no delete: there the sink keeps deleted rows.
$node->safe_psql('postgres', q{
	CREATE TABLE keep (id int PRIMARY KEY, v text);
	CREATE PUBLICATION keeppub FOR TABLE keep WITH (publish = 'insert, update');
});
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', publication => ARRAY['pub', 'keeppub'])");
$node->safe_psql('postgres', "INSERT INTO keep VALUES (1, 'kept'), (2, 'x'); DELETE FROM keep WHERE id = 1");
ok(delivered(), 'keep is delivered');
is($ch->select_rows('SELECT count() AS n FROM replica.keep FINAL WHERE _deleted = 0')->[0]{n},
	2, 'ClickHouse keeps the row its publication does not delete');
$ch->query_ok("INSERT INTO replica.acct (id, owner, balance, note, _version, _deleted)"
	  . " SELECT 987654321, owner, balance, note, 1, 0 FROM replica.acct FINAL WHERE _deleted = 0 LIMIT 1");
is($ch->select_rows('SELECT count() AS n FROM replica.acct FINAL WHERE _deleted = 0 AND id = 987654321')->[0]{n},
	1, 'ClickHouse holds a row the source does not');
my $resync_writes = start_segment(60);
$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('p', 'ch')");
ok(finish_segment($resync_writes), 'the workload writes while ch resyncs');
ok(poll("SELECT resync_reason IS NULL FROM replicant.destinations WHERE name = 'ch'"), "ch's resync ends");
ok(dest_state_is('ch', 'streaming'), 'and ch streams');
converges('acct', [ map { [ $_, $_, $_ ] } qw(id owner balance note) ], 'id');
converges('item', [ map { [ $_, $_, $_ ] } qw(a b qty label) ], 'a, b');
converges('doc', [ (map { [ $_, $_, $_ ] } qw(id rev title)), [ 'body_md5', 'md5(body)', 'lower(hex(MD5(body)))' ] ], 'id');
converges('txns', [ map { [ $_, $_, $_ ] } qw(id xid seg) ], 'id');
is($ch->select_rows('SELECT count() AS n FROM replica.keep FINAL WHERE _deleted = 0')->[0]{n},
	2, 'the resync swept nothing of keep');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink_a, [ map { "public.$_" } @TABLES ], 120),
	'a streamed on beside it');
phase('ch resynced');

$node->stop;
$ch->stop;
done_testing();
