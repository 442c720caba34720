# Every sink fault of docs/sink-protocol.md survived with no loss: one pipeline,
# the reference sink's faults switched at runtime.  Retried classes (500 on
# 30% of requests under a steady stream, 503 with Retry-After, 429, refused,
# reset, hang, an answer slower than http_timeout_ms) show state 'retrying'
# with retries growing, then converge once the fault is gone; a 302 (never
# followed) and a 400 halt, the 400 halt survives a server restart, and
# resume_pipeline delivers what queued meanwhile; a 413 splits a batch of
# several transactions, and halts on a single transaction too large.
#
# Every transaction of the test inserts exactly one row into ev, so the
# sink's txlog must hold exactly count(ev) distinct commit LSNs, in order.
use strict;
use warnings;
use List::Util qw(max min);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

# A refused-connection outage of 60 s: the worker's
# backoff walks up to its 30 s cap, so the sink is tried again at most ~30 s
# after it is back (the whole file runs in about 2 minutes).
my $OUTAGE_S = 60;
my $HTTP_TIMEOUT_MS = 1000;
my $CONNECT_TIMEOUT_MS = 500;
my $MAX_BODY = 1500;    # for the 413 scenarios: two small transactions fit, three don't

my $started = time();
my $node = ReplicantTest::new_node('faults');
my $sink = ReplicantTest::start_sink();
my $url = $sink->{url};

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE ev (id bigserial PRIMARY KEY, tag text NOT NULL, payload text);
CREATE PUBLICATION ev_pub FOR TABLE ev;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('faults', 'ev_pub', '$url', "
	  . "http_timeout_ms => $HTTP_TIMEOUT_MS, connect_timeout_ms => $CONNECT_TIMEOUT_MS)");

# ---- helpers ----------------------------------------------------------------

# Polls a boolean query until it is true or $timeout seconds pass; tolerates
# connection errors (the server may be restarting).
sub poll
{
	my ($sql, $timeout) = @_;
	my $deadline = time() + ($timeout // 60);
	while (time() < $deadline)
	{
		my ($ret, $out) = $node->psql('postgres', $sql);
		return 1 if $ret == 0 && $out eq 't';
		usleep(50_000);
	}
	diag("timed out after " . ($timeout // 60) . " s waiting for: $sql");
	return 0;
}

sub status
{
	my $row = $node->safe_psql('postgres',
		"SELECT state, retries, coalesce(last_error, '<null>'), coalesce(worker_pid, 0)"
		  . " FROM replicant.status WHERE pipeline = 'faults'");
	my %s;
	@s{qw(state retries last_error worker_pid)} = split /\|/, $row;
	return \%s;
}

# Commits $n transactions, each inserting one row.
sub commit_txns
{
	my ($n, $tag, $size) = @_;
	$size //= 20;
	$node->safe_psql('postgres',
		join('', map { "INSERT INTO ev (tag, payload) VALUES ('$tag', repeat('x', $size));\n" } 1 .. $n));
}

# The sink log from a byte offset on, as lines.
sub log_since
{
	my ($offset) = @_;
	my $all = PostgreSQL::Test::Utils::slurp_file($sink->{log});
	return split /\n/, substr($all, $offset);
}

# No loss, no effect-duplicate, commit order: the sink equals the source,
# and its txlog has exactly one entry per committed transaction, in order.
sub check_no_loss
{
	my ($label) = @_;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.ev'], 90),
		"$label: sink converges to the source");
	my @log = @{ $sink->txlog };
	my $txns = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
	my %seen;
	$seen{ $_->{commit_lsn} }++ for @log;
	is(scalar(keys %seen), $txns, "$label: every committed transaction arrived ($txns)");
	is(scalar(@log), scalar(keys %seen), "$label: none applied twice");
	my $ordered = 1;
	for my $i (1 .. $#log)
	{
		$ordered = 0 if $log[$i]{commit_lsn} <= $log[ $i - 1 ]{commit_lsn};
	}
	ok($ordered, "$label: applied in commit order");
}

sub check_streaming
{
	my ($label) = @_;
	ok( poll(
			"SELECT state = 'streaming' AND last_error IS NULL FROM replicant.status"
			  . " WHERE pipeline = 'faults'", 30),
		"$label: back to 'streaming' with last_error NULL");
}

# Restarts the sink on its port; the pipeline's URL must stay right.
sub restart_sink
{
	$sink->restart(@_);
	if ($sink->{url} ne $url)
	{
		fail("sink came back on another port");
		$url = $sink->{url};
		$node->safe_psql('postgres',
			"SELECT replicant.alter_pipeline('faults', sink_url => '$url')");
	}
}

# A retried fault: on, commit, 'retrying' with retries growing, off, converge.
sub retried_fault
{
	my (%a) = @_;
	my $label = $a{label};
	my $base = status()->{retries};
	my $offset = -s $sink->{log};
	$sink->control({ clear => 1, %{ $a{fault} } });
	commit_txns(3, $label);
	ok( poll(
			"SELECT state = 'retrying' AND retries >= $base + 2 FROM replicant.status"
			  . " WHERE pipeline = 'faults'", 30),
		"$label: state 'retrying', retries growing");
	my $s = status();
	like($s->{last_error}, $a{error}, "$label: last_error says why ($s->{last_error})");
	commit_txns(2, $label);
	$a{during}->($offset) if $a{during};
	$sink->control({ clear => 1 });
	check_no_loss($label);
	check_streaming($label);
	return $offset;
}

commit_txns(5, 'warmup');
check_no_loss('no fault');

# ---- HTTP 500 on 30% of requests under a steady stream of 200 transactions --
{
	my $label = '500 at 30%';
	my $base = status()->{retries};
	$sink->control({ clear => 1, fail_status => 500, fail_rate => 0.3 });
	my ($out, $err) = ('', '');
	my $stream = IPC::Run::start(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $node->host,
			'-p', $node->port, '-d', 'postgres', '-c',
			q{DO $$ BEGIN FOR i IN 1..200 LOOP
				INSERT INTO ev (tag, payload) VALUES ('500 at 30%', md5(i::text));
				COMMIT; PERFORM pg_sleep(0.02); END LOOP; END $$}
		],
		'>', \$out, '2>', \$err);
	my ($saw_retrying, $saw_error) = (0, '');
	while ($stream->pumpable)
	{
		my $s = status();
		if ($s->{state} eq 'retrying')
		{
			$saw_retrying = 1;
			$saw_error = $s->{last_error};
		}
		$stream->pump_nb;
		usleep(20_000);
	}
	ok($stream->finish, "$label: 200 transactions committed") or diag($err);
	my $retries = status()->{retries} - $base;
	ok($saw_retrying, "$label: state 'retrying' seen while the stream ran");
	like($saw_error, qr/^sink unavailable: HTTP 500$/, "$label: last_error while retrying");
	cmp_ok($retries, '>=', 5, "$label: retries grew by $retries");
	$sink->control({ clear => 1 });
	check_no_loss($label);
	check_streaming($label);
}

# ---- 503 with Retry-After: 2 -------------------------------------------------
{
	my $label = '503 Retry-After';
	my $base = status()->{retries};
	my $offset = -s $sink->{log};
	$sink->control({ clear => 1, fail_status => 503, retry_after => 2 });
	commit_txns(3, $label);

	# The gaps between attempts, by the times the sink logged its 503
	# answers at (in milliseconds, whenever this test gets to read them).
	my @lines;
	my $deadline = time() + 30;
	while (@lines < 5 && time() < $deadline)
	{
		@lines = grep { m{ POST /ingest 503 } } log_since($offset);
		usleep(10_000) if @lines < 5;
	}
	splice(@lines, 5) if @lines > 5;
	my @at = map { /^(\d\d):(\d\d):(\d\d\.\d+) / ? $1 * 3600 + $2 * 60 + $3 : undef } @lines;
	my @ids = map { /webhook-id=(\S+)/ } @lines;
	# Past midnight the clock starts again.
	$at[$_] += 86400 * ($at[$_] < $at[ $_ - 1 ]) foreach 1 .. $#at;
	is(scalar(@at), 5, "$label: five attempts answered 503");
	my @gaps = map { $at[$_] - $at[ $_ - 1 ] } 1 .. $#at;
	note(sprintf("$label: gaps between attempts %s s", join(', ', map { sprintf('%.2f', $_) } @gaps)));
	cmp_ok(min(@gaps), '>=', 1.5, "$label: every retry waited >= 1.5 s");
	my %distinct = map { $_ => 1 } @ids;
	is(scalar(keys %distinct), 1, "$label: the same webhook-id on every attempt");
	ok( poll(
			"SELECT state = 'retrying' AND retries >= $base + 4"
			  . " AND last_error = 'sink unavailable: HTTP 503'"
			  . " FROM replicant.status WHERE pipeline = 'faults'", 10),
		"$label: state 'retrying', retries growing");
	$sink->control({ clear => 1 });
	check_no_loss($label);
	check_streaming($label);
}

# ---- 429 ---------------------------------------------------------------------
retried_fault(
	label => '429',
	fault => { fail_status => 429 },
	error => qr/^sink unavailable: HTTP 429$/);

# ---- connection refused: the sink is down -------------------------------------
{
	my $label = 'refused';
	my $base = status()->{retries};
	my $down_at = time();
	$sink->stop;
	commit_txns(3, $label);
	ok( poll(
			"SELECT state = 'retrying' AND retries >= $base + 2 FROM replicant.status"
			  . " WHERE pipeline = 'faults'", 30),
		"$label: state 'retrying', retries growing");
	like(status()->{last_error}, qr/^sink unavailable: could not connect to sink/,
		"$label: last_error says could not connect");
	while (time() - $down_at < $OUTAGE_S)
	{
		commit_txns(1, $label);
		sleep 1;
	}
	cmp_ok(status()->{retries} - $base, '>=', 5, "$label: still retrying after ${OUTAGE_S} s");
	restart_sink();
	check_no_loss("$label for ${OUTAGE_S} s");
	check_streaming($label);
}

# ---- connection reset mid-request ----------------------------------------------
retried_fault(
	label => 'reset',
	fault => { reset => 1 },
	error => qr/^sink unavailable: (connection to sink was reset|sink closed the connection)/);

# ---- a sink that accepts and never answers ----------------------------------------
retried_fault(
	label => 'hang',
	fault => { hang => 1 },
	error => qr/^sink unavailable: sink did not answer within $HTTP_TIMEOUT_MS ms$/);

# ---- a sink slower than the timeout: applied, answered too late, re-sent --------
{
	my $dups = $sink->stats->{duplicate_transactions};
	my ($offset, $requests) = (-s $sink->{log}, $sink->stats->{requests});
	retried_fault(
		label => 'slow',
		fault => { delay_ms => 2 * $HTTP_TIMEOUT_MS },
		error => qr/^sink unavailable: sink did not answer within $HTTP_TIMEOUT_MS ms$/);
	cmp_ok($sink->stats->{duplicate_transactions}, '>', $dups,
		'slow: the late-answered batch was re-sent (and skipped by the sink)');
	# Let the sink's delayed answers to the abandoned attempts drain: it logs
	# a request when it answers, and they must not count as later requests.
	# It counts a request before the delay, so all are answered once every
	# request counted since has its log line.
	my $deadline = time() + 30;
	usleep(50_000)
	  until scalar(grep { m{ POST /ingest } } log_since($offset))
	  >= $sink->stats->{requests} - $requests
	  || time() > $deadline;
}

# ---- halts: a 302 is an answer, never followed ------------------------------------
sub halted_fault
{
	my (%a) = @_;
	my $label = $a{label};
	$sink->control({ clear => 1, %{ $a{fault} } }) if $a{fault};
	commit_txns(3, $label, $a{size});
	ok( poll(
			"SELECT state = 'halted' AND worker_pid IS NULL FROM replicant.status"
			  . " WHERE pipeline = 'faults'", 30),
		"$label: pipeline halts, its worker exits");
	my $s = status();
	like($s->{last_error}, $a{error}, "$label: last_error says why ($s->{last_error})");
	return;
}

sub resume
{
	my ($label) = @_;
	$sink->control({ clear => 1 });
	$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('faults')");
	check_no_loss("$label, resumed");
	check_streaming($label);
}

{
	my $offset = -s $sink->{log};
	halted_fault(
		label => '302',
		fault => { redirect => "http://127.0.0.1:$sink->{port}/redirected" },
		error => qr/^sink rejected batch: HTTP 302 \(commit LSN [0-9A-F]+\/[0-9A-F]+\)$/);
	my @lines = log_since($offset);
	my @redirected = grep { m{ POST /ingest 302 } } @lines;
	is(scalar(@redirected), 1, '302: one request, answered 302');
	is(scalar(grep { m{/redirected} } @lines), 0, '302: the redirect was not followed');
	sleep 2;
	is(scalar(grep { m{ POST /ingest } } log_since($offset)), 1, '302: no retry while halted');
	resume('302');
}

# ---- 400: halts, and the halt survives a server restart ----------------------------
{
	halted_fault(
		label => '400',
		fault => { fail_status => 400 },
		error => qr/^sink rejected batch: HTTP 400 \(commit LSN [0-9A-F]+\/[0-9A-F]+\)$/);
	commit_txns(3, '400 while halted');
	my $log_offset = -s $node->logfile;
	$node->restart;
	# Once the launcher's sync worker has mirrored the pipeline into shared
	# memory, the launcher has decided whether to start its worker.
	ok(poll('SELECT count(*) = 1 FROM replicant._worker_status()', 30),
		'400: the launcher saw the pipeline after the restart');
	sleep 2;
	my $s = status();
	is($s->{state}, 'halted', '400: still halted after a server restart');
	like($s->{last_error}, qr/^sink rejected batch: HTTP 400 /, '400: with its reason');
	is($s->{worker_pid}, 0, '400: no worker pid');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"),
		'0', '400: no pipeline worker runs');
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset);
	unlike($log, qr/replicant pipeline "faults" streaming from/, '400: no worker started since the restart');
	resume('400');
}

# ---- 413: a batch of several transactions is split ----------------------------------
{
	my $label = '413 split';
	my $offset = -s $sink->{log};
	my $accepted_before = scalar @{ $sink->stats->{accepted} };
	# Transactions committed while the sink is down queue behind the batch
	# being retried, and the next batch holds them all.
	$sink->stop;
	commit_txns(1, $label, 400);
	ok( poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'faults'", 30),
		"$label: retrying while the sink is down");
	commit_txns(20, $label, 400);
	restart_sink(max_body => $MAX_BODY);
	check_no_loss($label);
	check_streaming($label);
	my @lines = grep { m{ POST /ingest } } log_since($offset);
	my @too_large = grep { m{ 413 (\d+) bytes} && $1 > $MAX_BODY } @lines;
	my @ok = grep { m{ 20\d (\d+) bytes} && $1 <= $MAX_BODY } @lines;
	cmp_ok(scalar(@too_large), '>=', 1, "$label: the sink answered 413 (" . scalar(@too_large) . ' times)');
	is(scalar(@too_large) + scalar(@ok), scalar(@lines), "$label: every other request fit and was taken");
	my @accepted = @{ $sink->stats->{accepted} };
	@accepted = @accepted[ $accepted_before .. $#accepted ];
	my $txns = 0;
	$txns += $_->{transactions} for @accepted;
	is($txns, 21, "$label: 21 transactions in " . scalar(@accepted) . ' accepted requests');
	cmp_ok(max(map { $_->{transactions} } @accepted), '>', 1,
		"$label: split into halves, not one by one");
	is($node->safe_psql('postgres', "SELECT halt_reason IS NULL FROM replicant.pipelines WHERE name = 'faults'"),
		't', "$label: the pipeline did not halt");
}

# ---- 413 for a single transaction: halt ------------------------------------------
{
	halted_fault(
		label => '413 single',
		size  => 2 * $MAX_BODY,
		error => qr/^sink rejected batch: HTTP 413 for a single transaction \(commit LSN [0-9A-F]+\/[0-9A-F]+\)$/);
	resume('413 single');
}

my $stats = $sink->stats;
note(sprintf('%d requests, %d faults injected, %d transactions applied, %d re-sent and skipped, %.0f s',
		$stats->{requests}, $stats->{faults_injected}, $stats->{transactions_applied},
		$stats->{duplicate_transactions}, time() - $started));

done_testing();
