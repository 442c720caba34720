# replicant.metrics and the state-change log lines (issue 35 items 1 and 4):
#
#   (a) counters: after a workload, transactions/changes/batches/bytes
#       delivered equal replicant.status's, a non-transactional message is
#       counted; the latency histogram is
#       cumulative, its +Inf bucket equals _count; retained WAL is shown
#   (b) readers: a non-superuser member of pg_monitor, and one of
#       replicant_admin, read the view; a plain role cannot (neither the view
#       nor the function behind it)
#   (c) the sink refuses connections, then answers 503: lag_seconds rises,
#       retries are counted by status class (transport, 5xx), state is 3;
#       after the sink is back lag_seconds is 0 and state 2
#   (c2) a backfill: rows done and estimated, labelled with its table
#   (d) the sink answers 400: the pipeline halts; halts_total 1, state 4
#   (e) the log: started, streaming, retrying (status_class), recovered,
#       halted (reason quoted) are each one line "replicant: event=...
#       pipeline=... key=value...", parsed here; no row value in any line
#       or label
#   (f) the sink answers 410: state 5 and replicant_disabled_by_sink 1;
#       enabled again, or disabled by disable_pipeline(): 0
#   (g) halted in shared memory by the launcher, then in the catalog by a
#       failed sync: one halted event line, halts_total 1
#   (h) a worker stalled (SIGSTOP) before it sends: last_progress_timestamp
#       falls behind (lag_seconds cannot see it), fresh again after
#
# versions: all (shared memory counters, pg_replication_slots columns)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $secret_value = 'row-value-never-shown';
my $node = ReplicantTest::new_node('metrics');
my $sink = ReplicantTest::start_sink();
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE TABLE t2 (id int PRIMARY KEY);
	INSERT INTO t2 SELECT generate_series(1, 1000);
	ANALYZE t2;
	CREATE PUBLICATION pub FOR TABLE t, t2;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}', secret => 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0', messages => true)");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status"), 'streaming');

sub metric
{
	my ($name, %labels) = @_;
	my $where = join('', map { " AND $_ = '$labels{$_}'" } sort keys %labels);
	return $node->safe_psql('postgres',
		"SELECT value FROM replicant.metrics WHERE pipeline = 'p' AND metric = '$name'$where");
}

# (a) counters
$node->safe_psql('postgres', "INSERT INTO t SELECT g, '$secret_value' FROM generate_series(1, 50) g");
$node->safe_psql('postgres', "INSERT INTO t VALUES (51, '$secret_value')");
$node->safe_psql('postgres', "UPDATE t SET v = 'x' WHERE id <= 10");
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'outbox', '$secret_value')");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'a: delivered');
ok(ReplicantTest::poll($node, q{SELECT value = 1 FROM replicant.metrics WHERE metric = 'replicant_messages_delivered_total'}),
	'a: messages_delivered_total counts the non-transactional message');
my $status = $node->safe_psql('postgres',
	"SELECT transactions_delivered || ',' || changes_delivered || ',' || batches_delivered || ',' || bytes_delivered FROM replicant.status");
my ($txns, $changes, $batches, $bytes) = split /,/, $status;
is($changes, 61, 'a: 61 changes delivered (status)');
is(metric('replicant_transactions_delivered_total'), $txns, 'a: transactions_delivered_total equals status');
is(metric('replicant_changes_delivered_total'), 61, 'a: changes_delivered_total');
is(metric('replicant_batches_delivered_total'), $batches, 'a: batches_delivered_total');
is(metric('replicant_bytes_delivered_total'), $bytes, 'a: bytes_delivered_total');
is(metric('replicant_state'), 2, 'a: state 2 (streaming)');
is(metric('replicant_delivery_latency_seconds_count'), $txns, 'a: histogram _count counts transactions');
is(metric('replicant_delivery_latency_seconds_bucket', le => '+Inf'), $txns, 'a: +Inf bucket equals _count');
is($node->safe_psql('postgres', q{
	SELECT bool_and(value >= coalesce(prev, 0))
	  FROM (SELECT value, lag(value) OVER (ORDER BY CASE le WHEN '+Inf' THEN 'Infinity'::float8 ELSE le::float8 END) AS prev
	          FROM replicant.metrics WHERE metric = 'replicant_delivery_latency_seconds_bucket') b}),
	't', 'a: the buckets are cumulative');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.metrics WHERE metric = 'replicant_delivery_latency_seconds_bucket'"),
	14, 'a: 13 bounds (1 ms to 10 s) and +Inf');
ok(metric('replicant_retained_wal_bytes') > 0, 'a: retained WAL shown');
ok(metric('replicant_last_delivery_timestamp_seconds') > time() - 3600, 'a: last delivery time in epoch seconds');
is(metric('replicant_worker_starts_total'), 1, 'a: one worker start');
is(metric('replicant_lag_seconds'), 0, 'a: no lag once everything is delivered');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT pipeline, metric, status_class, le, table_name FROM replicant.metrics
	                       GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1) d}),
	0, 'a: one row per pipeline, metric and label set');
# The pipeline's one destination: its row of destination_status and its
# metrics count what status counts for the pipeline.
ok(ReplicantTest::poll($node, q{
	SELECT d.destination = 'default' AND s.transactions_delivered > 0
	       AND (s.state, s.transactions_delivered, s.changes_delivered, s.batches_delivered,
	            s.bytes_delivered, s.retries, s.last_http_status)
	         = (d.state, d.transactions_delivered, d.changes_delivered, d.batches_delivered,
	            d.bytes_delivered, d.retries, d.last_http_status)
	       AND (SELECT value FROM replicant.metrics WHERE pipeline = 'p' AND destination = 'default'
	             AND metric = 'replicant_transactions_delivered_total') = s.transactions_delivered
	  FROM replicant.status s JOIN replicant.destination_status d USING (pipeline)}),
	'a: destination_status and the destination\'s metrics count what status counts');
is(metric('replicant_worker_starts_total', destination => 'default'), '',
	'a: worker starts are the pipeline\'s, not a destination\'s');

# (b) readers
$node->safe_psql('postgres', q{
	CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
	CREATE ROLE admin LOGIN IN ROLE replicant_admin;
	CREATE ROLE nobody LOGIN;
	GRANT USAGE ON SCHEMA replicant TO nobody;
});
is($node->safe_psql('postgres', "SELECT value FROM replicant.metrics WHERE metric = 'replicant_changes_delivered_total'",
		extra_params => [ '-U', 'watcher' ]), 61, 'b: a pg_monitor member reads the view');
is($node->safe_psql('postgres', "SELECT value FROM replicant.metrics WHERE metric = 'replicant_changes_delivered_total'",
		extra_params => [ '-U', 'admin' ]), 61, 'b: a replicant_admin member reads the view');
my ($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM replicant.metrics', extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for view metrics/, 'b: a plain role may not read the view');
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM replicant._metrics()', extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for view metrics/, 'b: nor the function behind it');

# (c) the sink refuses connections, then answers 503
$sink->stop;
$node->safe_psql('postgres', "INSERT INTO t VALUES (100, '$secret_value')");
ok(ReplicantTest::poll($node, q{SELECT value >= 2 FROM replicant.metrics
	WHERE metric = 'replicant_lag_seconds'}, 120), 'c: lag_seconds rises while the sink is down');
ok(metric('replicant_retries_total', status_class => 'transport') >= 1, 'c: retries counted as transport');
is(metric('replicant_state'), 3, 'c: state 3 (retrying)');
$sink->restart;
$sink->control({ fail_status => 503 });
# A batch of its own: the first may have got through between restart and control.
$node->safe_psql('postgres', "INSERT INTO t VALUES (150, '$secret_value')");
ok(ReplicantTest::poll($node, q{SELECT value >= 1 FROM replicant.metrics
	WHERE metric = 'replicant_retries_total' AND status_class = '5xx'}, 120), 'c: 503 counted as 5xx');
$sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.retry_pipeline('p')");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'c: delivered once the sink is back');
is(metric('replicant_lag_seconds'), 0, 'c: lag_seconds back to 0');
is(metric('replicant_state'), 2, 'c: state 2 again');
ok(metric('replicant_delivery_latency_seconds_bucket', le => '1') < metric('replicant_delivery_latency_seconds_count'),
	'c: the delayed transaction is above the 1 s bucket');

# (c2) a backfill's progress, per table, while the sink is down and after
$sink->stop;
$node->safe_psql('postgres', "SELECT replicant.backfill('p', 't2')");
ok(ReplicantTest::poll($node, q{SELECT count(*) = 2 FROM replicant.metrics
	WHERE table_name = 'public.t2' AND metric IN ('replicant_backfill_rows_done', 'replicant_backfill_rows_estimated')}),
	'c2: rows done and estimated of the backfill of public.t2');
is(metric('replicant_backfill_rows_estimated', table_name => 'public.t2'), 1000, 'c2: 1000 rows estimated');
is(metric('replicant_backfill_rows_done', table_name => 'public.t2'), 0, 'c2: none done while the sink is down');
$sink->restart;
$node->safe_psql('postgres', "SELECT replicant.retry_pipeline('p')");
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status", 120), 'c2: the backfill is done');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.metrics WHERE table_name IS NOT NULL"), 0,
	'c2: a finished backfill has no rows');

# (d) a halt
$sink->control({ fail_status => 400 });
$node->safe_psql('postgres', "INSERT INTO t VALUES (101, '$secret_value')");
ok(ReplicantTest::poll($node, "SELECT value = 4 FROM replicant.metrics WHERE metric = 'replicant_state'", 120),
	'd: state 4 (halted)');
is(metric('replicant_halts_total'), 1, 'd: halts_total 1');

# (e) the log lines
my @events;
foreach my $line (split /\n/, PostgreSQL::Test::Utils::slurp_file($node->logfile))
{
	next unless $line =~ /LOG:  replicant: (event=.*)$/;
	my $fields = $1;
	my %f;
	while ($fields =~ /\G(\w+)=("(?:[^"\\]|\\.)*"|[A-Za-z0-9_.:\/+-]+)(?: |$)/gc)
	{
		my ($k, $v) = ($1, $2);
		$v =~ s/^"(.*)"$/$1/s and $v =~ s/\\(.)/$1/g;
		$f{$k} = $v;
	}
	is(pos($fields), length($fields), "e: the whole line parses: $fields");
	push @events, \%f;
}
my @mine = grep { $_->{pipeline} eq 'p' } @events;
my @names = map { $_->{event} } @mine;
note("events: @names");
is($names[0], 'started', 'e: started first');
ok((grep { $_->{event} eq 'streaming' && $_->{lsn} =~ m{^[0-9A-F]+/[0-9A-F]+$} } @mine), 'e: streaming, with its LSN');
ok((grep { $_->{event} eq 'retrying' && $_->{cause} eq 'sink' && $_->{status_class} eq 'transport' } @mine),
	'e: retrying, status_class transport');
ok((grep { $_->{event} eq 'recovered' && $_->{attempts} =~ /^\d+$/ } @mine), 'e: recovered, with its attempts');
my ($halted) = grep { $_->{event} eq 'halted' } @mine;
ok($halted, 'e: halted');
like($halted->{reason} // '', qr/HTTP 400/, 'e: the halt has its reason, quoted');
is($names[-1], 'halted', 'e: halted last');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/replicant: event=.*$secret_value/,
	'e: no row value in any event line');
unlike($node->safe_psql('postgres', 'SELECT string_agg(concat_ws(chr(9), pipeline, metric, status_class, le, table_name), chr(10)) FROM replicant.metrics'),
	qr/$secret_value|whsec|127\.0\.0\.1/, 'e: no row value, secret or URL in any label');

# (f) the sink disables the pipeline (410): replicant_disabled_by_sink 1
# while it stays disabled; enabling it, or a disable of the operator's, 0
$sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('p')");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'f: delivered after the resume');
is(metric('replicant_disabled_by_sink'), 0, 'f: disabled_by_sink 0 while streaming');
$sink->control({ fail_status => 410 });
$node->safe_psql('postgres', "INSERT INTO t VALUES (102, '$secret_value')");
ok(ReplicantTest::poll($node, "SELECT value = 5 FROM replicant.metrics WHERE metric = 'replicant_state'", 120),
	'f: state 5 (disabled)');
ok(ReplicantTest::poll($node, "SELECT value = 1 FROM replicant.metrics WHERE metric = 'replicant_disabled_by_sink'", 60),
	'f: disabled_by_sink 1 after the sink answered 410');
$sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'f: delivered once enabled');
is(metric('replicant_disabled_by_sink'), 0, 'f: disabled_by_sink 0 once enabled');
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
ok(ReplicantTest::poll($node, "SELECT value = 5 FROM replicant.metrics WHERE metric = 'replicant_state'", 60),
	'f: state 5 after disable_pipeline');
is(metric('replicant_disabled_by_sink'), 0, 'f: disabled_by_sink 0 when the operator disabled it');

# (g) a pipeline halted in shared memory only (its database refuses
# connections: the launcher halts it), whose database's next sync fails
# (fault sync:error=42P01; a new pipeline requests it) and halts its
# pipelines in the catalog too: one
# "halted" event line, and halts_total 1
$node->safe_psql('postgres', q{
ALTER SYSTEM SET replicant.max_restart_delay = '100ms';
SELECT pg_reload_conf();
CREATE DATABASE closing;
});
$node->safe_psql('closing', q{
CREATE EXTENSION replicant;
CREATE TABLE c (id int PRIMARY KEY);
CREATE PUBLICATION c_pub FOR TABLE c;
});
$node->safe_psql('closing', "SELECT replicant.create_pipeline('closing', 'c_pub', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'closing'", 120, 'closing'),
	'g: streaming');
my $from = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER DATABASE closing ALLOW_CONNECTIONS false');
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
	  . " WHERE datname = 'closing' AND backend_type = 'replicant pipeline'");
my $closing_halts = sub {
	my @l = PostgreSQL::Test::Utils::slurp_file($node->logfile, $from) =~ /LOG:  replicant: event=halted pipeline=closing /g;
	return scalar(@l);
};
foreach (1 .. 1800)
{
	last if $closing_halts->();
	select(undef, undef, undef, 0.1);
}
is($closing_halts->(), 1, 'g: the launcher halts it in shared memory');
$node->safe_psql('postgres', q{
ALTER SYSTEM SET replicant.fault_point = 'sync:error=42P01';
SELECT pg_reload_conf();
});
# pg_reload_conf() only signals the postmaster: a sync worker it starts
# before it has read the file again runs without the fault, succeeds, and
# lets the pipeline stream (and halt a second time).  A backend shows the
# new value only after the postmaster read it.
ok(ReplicantTest::poll($node, "SELECT current_setting('replicant.fault_point') = 'sync:error=42P01'"),
	'g: the fault point is set');
$node->safe_psql('postgres', 'ALTER DATABASE closing ALLOW_CONNECTIONS true');
# A disabled pipeline's creation requests the database's sync.
$node->safe_psql('closing', "SELECT replicant.create_pipeline('closing2', 'c_pub', '$sink->{url}', enabled => false)");
ok(ReplicantTest::poll($node,
		"SELECT halt_reason LIKE 'phase \"sync\" failed with error class 42P01%' FROM replicant.pipelines WHERE name = 'closing'",
		120, 'closing'),
	'g: the failed sync halts it in the catalog');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();');
is($closing_halts->(), 1, 'g: one halted event line');
is($node->safe_psql('closing', "SELECT value FROM replicant.metrics WHERE pipeline = 'closing' AND metric = 'replicant_halts_total'"),
	1, 'g: halts_total 1');

# (h) a worker that stalls before it sends anything (SIGSTOP here; on 17+
# a standby of synchronized_standby_slots that is down does the same, and
# so does decoding a huge transaction): lag_seconds stays 0, but
# replicant_last_progress_timestamp_seconds, refreshed while it idles,
# falls behind; once it runs again it delivers and is fresh
$node->safe_psql('postgres', q{
CREATE TABLE t3 (id int PRIMARY KEY);
CREATE PUBLICATION pub3 FOR TABLE t3;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('stall', 'pub3', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'stall'"),
	'h: streaming');
my $progress = "SELECT value FROM replicant.metrics WHERE pipeline = 'stall'"
  . " AND metric = 'replicant_last_progress_timestamp_seconds'";
my $first = $node->safe_psql('postgres', $progress);
like($first, qr/^\d+(\.\d+)?$/, 'h: last_progress_timestamp_seconds is shown');
$first = 0 if $first eq '';
ok(ReplicantTest::poll($node, "SELECT value > $first FROM replicant.metrics WHERE pipeline = 'stall'"
		  . " AND metric = 'replicant_last_progress_timestamp_seconds'"),
	'h: an idle worker refreshes it');
my $worker = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'stall'");
kill 'STOP', $worker;
$node->safe_psql('postgres', 'INSERT INTO t3 SELECT generate_series(1, 100)');
ok(ReplicantTest::poll($node, "SELECT extract(epoch FROM clock_timestamp()) - value >= 3 FROM replicant.metrics"
		  . " WHERE pipeline = 'stall' AND metric = 'replicant_last_progress_timestamp_seconds'", 60),
	'h: stalled, it falls behind');
my $stalled = $node->safe_psql('postgres', "SELECT string_agg(metric || '=' || value, ' ' ORDER BY metric)"
	  . " FROM replicant.metrics WHERE pipeline = 'stall'"
	  . " AND metric IN ('replicant_lag_seconds', 'replicant_state')");
kill 'CONT', $worker;
note("stalled: $stalled");
like($stalled, qr/replicant_state=2/, 'h: (state 2 all along: no other alert fires)');
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('stall', pg_current_wal_lsn(), 120000)"),
	't', 'h: delivered once it runs again');
ok(ReplicantTest::poll($node, "SELECT extract(epoch FROM clock_timestamp()) - value < 3 FROM replicant.metrics"
		  . " WHERE pipeline = 'stall' AND metric = 'replicant_last_progress_timestamp_seconds'", 60),
	'h: and its progress is fresh again');

$node->stop;
$sink->stop;
done_testing();
