# A worker's memory stays flat over a long run:
#
#   - 200,000 transactional messages to a CloudEvents pipeline: the private
#     memory of the worker (smaps_rollup) grows by less than 8 MB from the
#     start to the end of the run.  Each message used to leave about 128
#     bytes behind in the decoding context, which is never reset: 25 MB at
#     least for this run, so the bound cannot hold with that leak;
#   - one 40 MB message: afterwards the memory contexts that held it (the
#     decoding state's, the batch's, the WAL reader's) are back below 4 MB
#     over what they were; the buffers it grew used to be kept for good;
#   - tables created, written and dropped, 2 x 500 of them, on a FOR ALL
#     TABLES pipeline: the relation cache's memory does not grow with the
#     second round, and no shape of a dropped table is left in
#     replicant.table_shapes;
#   - a dropped table's OID given to a new table of other columns (through
#     binary-upgrade mode): the new table is delivered, not halted on as if
#     it had lost the old one's columns; also when the OID is reused before
#     the dropped table's saved shape was forgotten.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('memory');
my $sink = ReplicantTest::start_sink();
my $every_status =
  "SELECT state || ' ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'every'";
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub FOR TABLE t;
CREATE PUBLICATION everything FOR ALL TABLES;
});
# Requests of at most 256 kB: a batch's own memory, which is bounded but
# grows with the backlog up to batch_max_bytes, stays out of the measure.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ce', 'pub', '$sink->{url}', format => 'cloudevents', messages => true,"
	  . " batch_max_bytes => 262144)");
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('every', 'everything', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT bool_and(state = 'streaming') AND count(*) = 2 FROM replicant.status"),
	'both pipelines stream');

sub worker_pid
{
	my ($p) = @_;
	return $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = '$p'");
}

# The worker's private memory in kB (smaps_rollup: what only it uses).
sub private_kb
{
	my ($pid) = @_;
	my $rollup = slurp_file("/proc/$pid/smaps_rollup");
	my $kb = 0;
	$kb += $1 while $rollup =~ /^Private_(?:Clean|Dirty):\s+(\d+) kB/mg;
	return $kb;
}

sub delivered
{
	my ($p) = @_;
	return $node->safe_psql('postgres',
		"SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 600000)") eq 't';
}

# $txns transactions of 10 transactional messages each, from two clients.
my $script = PostgreSQL::Test::Utils::tempdir() . '/messages.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"SELECT pg_logical_emit_message(true, 'bench', 'a message of the long run') FROM generate_series(1, 10);\n");

sub emit_messages
{
	my ($txns) = @_;
	$node->command_ok(
		[ 'pgbench', '-n', '-c', '2', '-t', $txns / 2, '-f', $script, '-h', $node->host,
			'-p', $node->port, 'postgres' ],
		"$txns transactions of 10 messages");
	ok(delivered('ce'), "the $txns transactions are delivered");
	return;
}

# The worker's memory contexts, as pg_log_backend_memory_contexts logs them.
sub memory_contexts
{
	my ($pid) = @_;
	my $from = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my $dump;
	foreach (1 .. 600)
	{
		$dump = slurp_file($node->logfile, $from);
		last if $dump =~ /Grand total:/;
		usleep(100_000);
	}
	# Past 100 children a context's others are summed up in one line, which
	# gives the parent's level.
	return [
		map {
			    /level: (\d+); \d+ more child contexts containing (\d+) total in/ ? [ $1 + 1, '', $2 ]
			  : /level: (\d+); (.*?): (\d+) total in/ ? [ $1, $2, $3 ]
			  : ()
		} split /\n/, $dump
	];
}

# Bytes in the named context and (with children) below it.
sub context_bytes
{
	my ($contexts, $name, $children) = @_;
	my ($level, $total);
	foreach my $c (@$contexts)
	{
		if (defined $level)
		{
			last if $c->[0] <= $level;
			$total += $c->[2] if $children;
			next;
		}
		($level, $total) = ($c->[0], $c->[2]) if $c->[1] eq $name;
	}
	return $total // 0;
}

# ---- 200,000 transactional messages ----------------------------------------
emit_messages(5000);    # warm-up: caches, buffers, batches at their size
my $pid = worker_pid('ce');
my $start_kb = private_kb($pid);
emit_messages(20000);
is(worker_pid('ce'), $pid, 'the same worker ran throughout');
my $end_kb = private_kb($pid);
my $growth = $end_kb - $start_kb;
note("private memory of the worker: $start_kb kB before, $end_kb kB after 200,000 messages");
cmp_ok($growth, '<', 8192, "private memory grew by less than 8 MB over 200,000 messages ($growth kB)");

# ---- one 40 MB message -----------------------------------------------------
my $before = memory_contexts($pid);
$node->safe_psql('postgres',
	"SELECT pg_logical_emit_message(true, 'big', repeat('0123456789', 4 * 1024 * 1024))");
ok(delivered('ce'), 'the 40 MB message is delivered');
emit_messages(100);    # and transactions after it
my $after = memory_contexts($pid);
foreach my $name ('Logical decoding context', 'TopMemoryContext', 'replicant decoder')
{
	my ($b, $a) = (context_bytes($before, $name), context_bytes($after, $name));
	note("$name: $b bytes before the 40 MB message, $a after");
	cmp_ok($a - $b, '<', 4 * 1024 * 1024, "$name: back within 4 MB after the 40 MB message");
}

# ---- tables created and dropped ------------------------------------------------
sub churn
{
	my ($round) = @_;
	foreach my $batch (1 .. 5)
	{
		$node->safe_psql('postgres', qq{
DO \$\$
BEGIN
	FOR i IN 1 .. 100 LOOP
		EXECUTE format('CREATE TABLE churn_%s_%s_%s (id int PRIMARY KEY, v text)', $round, $batch, i);
		EXECUTE format('INSERT INTO churn_%s_%s_%s VALUES (1, ''x'')', $round, $batch, i);
		EXECUTE format('DROP TABLE churn_%s_%s_%s', $round, $batch, i);
	END LOOP;
END
\$\$;});
	}
	ok(delivered('every'), "round $round: 500 tables created, written and dropped");
	# Dropped tables are looked for at checkpoints, every 10 s at most, and
	# forgotten at a later one: keep checkpoints coming until they are.
	my $left;
	foreach my $i (1 .. 1200)
	{
		$node->safe_psql('postgres', "INSERT INTO t VALUES ($round * 100000 + $i, 'x')");
		$left = $node->safe_psql('postgres',
			"SELECT count(*) FROM replicant.table_shapes s JOIN replicant.pipelines p ON p.id = s.pipeline_id"
			  . " WHERE p.name = 'every' AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = s.relid)");
		last if $left eq '0';
		usleep(100_000);
	}
	is($left, '0', "round $round: no shape of a dropped table is left");
	return;
}

my $every = worker_pid('every');
churn(1);
my $round1 = context_bytes(memory_contexts($every), 'replicant relation info', 1);
churn(2);
my $round2 = context_bytes(memory_contexts($every), 'replicant relation info', 1);
is(worker_pid('every'), $every, 'the same worker ran throughout');
note("relation cache: $round1 bytes after 500 dropped tables, $round2 after 1,000");
cmp_ok($round2 - $round1, '<', 256 * 1024, 'the relation cache does not grow with dropped tables');

# ---- a dropped table's OID given to a new table -------------------------------
# The saved shape of a dropped table must not be the baseline of a new table
# that gets its OID: the new one would halt as if it had lost columns.  The
# server hands out an OID again only after wrapping around; binary-upgrade
# mode (pg_upgrade's) lets the test choose the new table's OIDs instead.
{
	$node->safe_psql('postgres', "CREATE TABLE reused (id int, a int, b int); INSERT INTO reused VALUES (1, 2, 3)");
	my $oid = $node->safe_psql('postgres', "SELECT 'reused'::regclass::oid");
	my $shape_of = "SELECT count(*) FROM replicant.table_shapes WHERE relid = $oid";
	ok(delivered('every'), 'reused OID: the first table delivered');
	ok(ReplicantTest::poll($node, "SELECT ($shape_of) = 1"), 'reused OID: its shape saved');
	$node->safe_psql('postgres', 'DROP TABLE reused');
	my $left;
	foreach my $i (1 .. 1200)
	{
		$node->safe_psql('postgres', "INSERT INTO t VALUES (900000 + $i, 'x')");
		last if ($left = $node->safe_psql('postgres', $shape_of)) eq '0';
		usleep(100_000);
	}
	is($left, '0', 'reused OID: the dropped table\'s shape is forgotten');

	$node->stop;
	PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '-D', $node->data_dir, '-l', $node->logfile,
		'-o', '-b', '-w', 'start');
	# Minors from 2026 on also take the new columns' versions.
	my $versions = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_proc WHERE proname = 'binary_upgrade_set_next_attribute_versions'") eq '1'
	  ? 'SELECT binary_upgrade_set_next_attribute_versions(ARRAY[pg_current_wal_lsn(), pg_current_wal_lsn()]);'
	  : '';
	$node->safe_psql('postgres', qq{
SELECT binary_upgrade_set_next_heap_pg_class_oid($oid);
SELECT binary_upgrade_set_next_heap_relfilenode(900003);
SELECT binary_upgrade_set_next_pg_type_oid(900001);
SELECT binary_upgrade_set_next_array_pg_type_oid(900002);
$versions
CREATE TABLE renewed (id int, c int);
});
	PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '-D', $node->data_dir, '-m', 'fast', '-w', 'stop');
	$node->start;
	is($node->safe_psql('postgres', "SELECT 'renewed'::regclass::oid"), $oid, 'reused OID: the new table has it');
	$node->safe_psql('postgres', 'INSERT INTO renewed VALUES (1, 4)');
	wait_row_or_halt('public.renewed');
	is($node->safe_psql('postgres', $every_status), 'streaming ', 'reused OID: nothing halted');
	is($sink->dump('public.renewed'), qq({"c":4,"id":1}\n), 'reused OID: the new table\'s row arrived');
}

# ---- an OID given to a new table before the dropped table's shape is gone ---
# Pruning forgets a dropped table's shape only at a checkpoint that finds its
# OID missing; here the OID is reused while the pipeline is disabled (a
# maintenance window), so none looked in between.  A shape names its table's
# row type, which the new table does not share: it is a new table.
{
	$node->safe_psql('postgres', "CREATE TABLE reused2 (id int, a int, b int); INSERT INTO reused2 VALUES (1, 2, 3)");
	my $oid = $node->safe_psql('postgres', "SELECT 'reused2'::regclass::oid");
	ok(ReplicantTest::poll($node, "SELECT count(*) = 1 FROM replicant.table_shapes WHERE relid = $oid"),
		'reused OID early: the first table\'s shape is saved');
	$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('every')");
	ok(ReplicantTest::poll($node,
			"SELECT state = 'disabled' AND worker_pid IS NULL FROM replicant.status WHERE pipeline = 'every'"),
		'reused OID early: the pipeline is disabled');
	$node->safe_psql('postgres', 'DROP TABLE reused2');

	$node->stop;
	PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '-D', $node->data_dir, '-l', $node->logfile,
		'-o', '-b', '-w', 'start');
	my $versions = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_proc WHERE proname = 'binary_upgrade_set_next_attribute_versions'") eq '1'
	  ? 'SELECT binary_upgrade_set_next_attribute_versions(ARRAY[pg_current_wal_lsn(), pg_current_wal_lsn()]);'
	  : '';
	$node->safe_psql('postgres', qq{
SELECT binary_upgrade_set_next_heap_pg_class_oid($oid);
SELECT binary_upgrade_set_next_heap_relfilenode(900013);
SELECT binary_upgrade_set_next_pg_type_oid(900011);
SELECT binary_upgrade_set_next_array_pg_type_oid(900012);
$versions
CREATE TABLE renewed2 (id int, c int);
});
	PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '-D', $node->data_dir, '-m', 'fast', '-w', 'stop');
	$node->start;
	is($node->safe_psql('postgres', "SELECT 'renewed2'::regclass::oid"), $oid,
		'reused OID early: the new table has the dropped one\'s OID');
	is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.table_shapes WHERE relid = $oid"), '1',
		'reused OID early: the dropped table\'s shape is still saved');

	$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('every')");
	$node->safe_psql('postgres', 'INSERT INTO renewed2 VALUES (1, 4)');
	wait_row_or_halt('public.renewed2');
	is($node->safe_psql('postgres', $every_status), 'streaming ', 'oid_reuse_before_prune: nothing halted');
	is($sink->dump('public.renewed2'), qq({"c":4,"id":1}\n), 'oid_reuse_before_prune: the new table\'s row arrived');
}

# Until the table's row arrives or pipeline "every" halts.  Its state is read
# after: one read before the row arrived may still say "starting".
sub wait_row_or_halt
{
	my ($table) = @_;
	foreach (1 .. 1200)
	{
		return if $sink->dump($table) ne '' || $node->safe_psql('postgres', $every_status) =~ /^halted/;
		usleep(100_000);
	}
	return;
}

$node->stop;
done_testing();
