# A shard worker's halt is recorded for good before the pipeline worker,
# which watches shared memory, ends the snapshot and stops the shard workers:
# a halt that shared memory showed first could be cut off on its way to the
# catalog, and the launcher would then run the snapshot again (a CI run of
# 062_clickhouse_format.pl saw "halted" and then no error).  The fault point
# halt:pause holds each halt for two seconds between its two records.
#
# Two shard workers refused at once: the first halt stands, in the catalog
# and in the status; the second does not replace it.
#
# The same for 410 Gone, which disables the pipeline: a shard worker told so
# leaves its shard unread, so the snapshot must not finish without it.  Once
# enabled again the snapshot resumes and the sink gets every row.
#
# And for snapshot workers the postmaster could not start at all.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('snaphalt');
my $sink = ReplicantTest::start_sink(fail_status => 400);

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 1000) g;
	CREATE PUBLICATION pub FOR TABLE t;
	ALTER SYSTEM SET replicant.fault_point = 'halt:pause';
	SELECT pg_reload_conf();
});
# Waits until neither the pipeline worker nor a shard worker runs.
sub no_worker_left
{
	my ($name) = @_;
	ok(ReplicantTest::poll($node,
			"SELECT count(*) = 0 FROM pg_stat_activity"
			  . " WHERE backend_type IN ('replicant pipeline', 'replicant snapshot')"),
		$name);
	return;
}

my $offset = -s $node->logfile;
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}', snapshot => 'initial', snapshot_workers => 2)");

ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'"),
	'the refused snapshot batch halts the pipeline');
like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'p'"),
	qr/^sink rejected snapshot batch: HTTP 400/,
	'... and the catalog holds the halt once the pipeline shows it');
no_worker_left('no worker is left');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'p'"),
	qr/^sink rejected snapshot batch: HTTP 400/, 'the status names the halt');

$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();");
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
like($log, qr/fault point "halt" reached, pausing/, 'premise: the halt paused between its records');
unlike($log, qr/terminating background worker "replicant snapshot"[^\n]*\n[^\n]*CONTEXT:  SQL statement "UPDATE replicant\.pipelines SET halt_reason/,
	'no shard worker was stopped while it recorded its halt');
unlike($log, qr/resumes its initial snapshot/, 'the snapshot was not run again');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('p')");

# ---- two shard workers refused at once: the first halt stands ----------------
# Each reads a table of its own, both batches are refused; the halt held
# between its two records gives the other time to halt too.  Its halt must
# not replace the first one's reason (nor be logged as a halt).
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET replicant.fault_point = 'halt:pause';
	SELECT pg_reload_conf();
	CREATE TABLE t1 (id int PRIMARY KEY);
	CREATE TABLE t2 (id int PRIMARY KEY);
	INSERT INTO t1 SELECT generate_series(1, 100);
	INSERT INTO t2 SELECT generate_series(1, 100);
	CREATE PUBLICATION pub2 FOR TABLE t1, t2;
});
# The tables' empty first markers pass, their rows do not (413, a halt
# for a snapshot batch).
my $small = ReplicantTest::start_sink(name => 'small', max_body => 1000);
$offset = -s $node->logfile;
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('two', 'pub2', '$small->{url}', snapshot => 'initial', snapshot_workers => 2)");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'two'"),
	'two refusals: halted');
no_worker_left('two refusals: no worker is left');
$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();");
$log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
my @halts = ($log =~ /replicant pipeline "two" halted: ([^\n]*)/g);
is(scalar(@halts), 1, 'two refusals: one halt is recorded') or diag(join("\n", @halts));
is($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'two'"),
	$halts[0] // '', '... and it is the one the catalog holds');
is($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'two'"),
	$halts[0] // '', '... and the status shows');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('two')");

# ---- 410 Gone to one shard worker mid-snapshot -----------------------------
# One row per block (fillfactor 10, a 420-byte pad): 6,000 rows make six
# 1,024-block shards for the two shard workers; a slow sink spreads them out.
my $sink2 = ReplicantTest::start_sink(name => 'gone', delay_ms => 100);
$node->safe_psql('postgres', q{
	CREATE TABLE wide (id bigint PRIMARY KEY, pad text) WITH (fillfactor = 10, autovacuum_enabled = off);
	INSERT INTO wide SELECT g, repeat(md5(g::text), 14) FROM generate_series(1, 6000) g;
	CREATE PUBLICATION pub_wide FOR TABLE wide;
});
$offset = -s $node->logfile;
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('g', 'pub_wide', '$sink2->{url}', snapshot => 'initial',"
	  . " snapshot_workers => 2, batch_max_bytes => 65536)");
ok(ReplicantTest::poll($node, q{
		SELECT rows_done > 0 AND state = 'running' FROM replicant.backfill_status
		 WHERE pipeline = 'g' AND relation = 'wide'::regclass}),
	'gone: the snapshot is under way');
$sink2->control({ fail_status => 410, fail_first => 1 });
ok(ReplicantTest::poll($node,
		"SELECT state = 'disabled' AND last_error LIKE '%410 Gone%' FROM replicant.status WHERE pipeline = 'g'"),
	'gone: one 410 disables the pipeline');
no_worker_left('gone: no worker is left');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset), qr/pipeline "g" finished its initial snapshot/,
	'gone: the snapshot did not finish without the shard the sink refused');
$sink2->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('g')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'g'", 180),
	'gone: enabled again, the snapshot finishes');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink2, ['wide']), 'gone: the sink has every row');

# ---- a snapshot worker that never started -----------------------------------
# The postmaster could not fork the shard workers (RLIMIT_NPROC, memory):
# they stopped without reading anything and without an error of their own.
# The snapshot must not end as if they had read their shards: the pipeline
# worker restarts it, and once workers can start again every row arrives.
# The pipeline worker is held at its first marker (deliver:hold) while the
# postmaster's process limit is lowered (prlimit on the postmaster only),
# and released through a session opened before; the limit is restored once
# the worker went on.
{
	my $sink3 = ReplicantTest::start_sink(name => 'sink_fork');
	$node->safe_psql('postgres', q{
		CREATE TABLE forked (id int PRIMARY KEY, v text);
		INSERT INTO forked SELECT g, 'row ' || g FROM generate_series(1, 1000) g;
		CREATE PUBLICATION pub_forked FOR TABLE forked;
		ALTER SYSTEM SET replicant.fault_point = 'deliver:hold';
		SELECT pg_reload_conf();
	});
	my $from = -s $node->logfile;
	# The log from $from once it matches, or undef.
	my $log_has = sub {
		my ($re) = @_;
		foreach (1 .. 2400)
		{
			my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $from);
			return $log if $log =~ $re;
			usleep(50_000);
		}
		return undef;
	};
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('f', 'pub_forked', '$sink3->{url}', snapshot => 'initial',"
		  . " snapshot_workers => 2)");
	ok(defined $log_has->(qr/fault point "deliver" reached, holding/),
		'fork: the pipeline worker holds at its first marker');

	my ($in, $out, $err) = ('', '', '');
	my $session = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-h', $node->host, '-p', $node->port, '-d', 'postgres' ],
		'<', \$in, '>', \$out, '2>', \$err);
	$in .= "SELECT 'ready';\n";
	$session->pump until $out =~ /ready/;
	my $pm = $node->{_pid};
	my ($soft) = (`prlimit --pid $pm --nproc --noheadings --output SOFT` =~ /(\S+)/);
	system('prlimit', '--pid', $pm, '--nproc=1:') == 0 or BAIL_OUT('prlimit failed');
	$in .= "ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf(); SELECT 'released';\n";
	$session->pump until $out =~ /released/;
	my $went_on = $log_has->(
		qr/replicant pipeline "f" (finished its initial snapshot|restarts its snapshot after a snapshot worker ended with its shards unread)/);
	my $forks = () = PostgreSQL::Test::Utils::slurp_file($node->logfile, $from) =~ /could not fork (?:background )?worker process/g;
	system('prlimit', '--pid', $pm, "--nproc=$soft:") == 0 or BAIL_OUT('prlimit restore failed');
	$in .= "\\q\n";
	$session->finish;
	ok(defined $went_on, 'fork: the pipeline worker went on');
	cmp_ok($forks, '>', 0, 'fork: the postmaster could not start the snapshot workers');
	unlike($went_on // '', qr/replicant pipeline "f" finished its initial snapshot/,
		'shard_fork_failure: the snapshot did not finish without its shards read');
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink3, ['forked']),
		'fork: every row of the initial snapshot arrives');
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'f'"),
		'fork: and the pipeline streams');
}

done_testing();
