# Outbox messages, the read-your-writes barrier and sink lifecycle signals:
# pg_logical_emit_message() delivery (transactional and not, prefix filter,
# rollback, crash), replicant.await_delivered(), 410 Gone, secret rotation,
# and the status view's sink_latency_ms / last_http_status.
use strict;
use warnings;
use MIME::Base64;
use Time::HiRes qw(time);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('outbox');
my $sink = ReplicantTest::start_sink(secret => 'whsec_b2xkLXNlY3JldA==');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE orders (id int PRIMARY KEY, total numeric);
	CREATE PUBLICATION outbox_pub FOR TABLE orders;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('outbox', 'outbox_pub', '$sink->{url}',"
	  . " secret => 'whsec_b2xkLXNlY3JldA==', messages => true,"
	  . " message_prefixes => ARRAY['outbox', 'audit'])");

# 1. Messages
$node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO orders VALUES (1, 10);
	SELECT pg_logical_emit_message(true, 'outbox', 'order 1 created');
	INSERT INTO orders VALUES (2, 20);
	SELECT pg_logical_emit_message(true, 'audit', convert_to('second', 'UTF8'));
	SELECT pg_logical_emit_message(true, 'ignored', 'not in the prefix list');
	SELECT pg_logical_emit_message(true, 'replicant.watermark', 'internal');
	COMMIT;
	BEGIN;
	INSERT INTO orders VALUES (3, 30);
	SELECT pg_logical_emit_message(true, 'outbox', 'rolled back');
	ROLLBACK;
	SELECT pg_logical_emit_message(false, 'outbox', 'not transactional');
});
ok($node->poll_query_until('postgres', 'SELECT true FROM replicant.status WHERE transactions_delivered >= 1'),
	'transaction delivered');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['orders']), 'rows delivered');
$node->poll_query_until('postgres', 'SELECT batches_delivered >= 2 FROM replicant.status');
my @messages = @{ $sink->messages };
my @txn = grep { $_->{transactional} } @messages;
my @plain = grep { !$_->{transactional} } @messages;
is_deeply([ map { $_->{prefix} . ':' . decode_base64($_->{content}) } @txn ],
	[ 'outbox:order 1 created', 'audit:second' ],
	'transactional messages ride their transaction in emission order, filtered by prefix');
ok($txn[0]{lsn} < $txn[1]{lsn} && $txn[1]{lsn} < $txn[0]{commit_lsn},
	'message LSNs are in emission order and before the commit');
is($txn[0]{commit_lsn}, $sink->txlog->[0]{commit_lsn}, 'messages carry their transaction\'s commit_lsn');
is_deeply([ map { $_->{prefix} . ':' . decode_base64($_->{content}) } @plain ],
	['outbox:not transactional'], 'a non-transactional message arrives on its own');
ok(!grep({ decode_base64($_->{content}) eq 'rolled back' } @messages),
	'a rolled-back transaction\'s message never arrives');

# A crash after the 2xx and before the checkpoint re-delivers that batch once;
# the sink's commit_lsn dedup keeps the message applied once.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET replicant.fault_point = 'after_ack'; SELECT pg_reload_conf()");
my $pid = $node->safe_psql('postgres', 'SELECT worker_pid FROM replicant.status');
$node->safe_psql('postgres',
	"BEGIN; INSERT INTO orders VALUES (4, 40); SELECT pg_logical_emit_message(true, 'outbox', 'crash'); COMMIT;");
# The restarted worker meets the fault again until it is reset: reset it as
# soon as the first worker is gone.
ok($node->poll_query_until('postgres',
		"SELECT coalesce(worker_pid, 0) <> $pid FROM replicant.status"),
	'worker crashed after the ack');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf()");
# The restarted worker may have crashed once more before the reset; the
# launcher's backoff brings it back.
ok($node->poll_query_until('postgres',
		"SELECT state = 'streaming' AND worker_pid IS NOT NULL FROM replicant.status"),
	'worker streaming again');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['orders']), 'row after the crash delivered');
is(scalar(grep { decode_base64($_->{content}) eq 'crash' } @{ $sink->messages }), 1,
	'message of the re-delivered transaction applied once');
cmp_ok($sink->stats->{duplicate_transactions}, '>=', 1, 'the batch was re-delivered and skipped');

# 2. await_delivered
is($node->safe_psql('postgres',
		"INSERT INTO orders VALUES (5, 50); SELECT replicant.await_delivered('outbox')"),
	't', 'await_delivered returns true once the sink acknowledged');
ok($sink->dump('public.orders') =~ /"id":5/, 'and the row is at the sink by then');

my @delays;
for my $i (6 .. 15)
{
	my $returned = $node->safe_psql('postgres',
		"INSERT INTO orders VALUES ($i, $i); SELECT replicant.await_delivered('outbox');"
		  . " SELECT extract(epoch from clock_timestamp())");
	my ($ok, $at) = split /\n/, $returned;
	is($ok, 't', "await_delivered for row $i");
	my $arrival = $sink->txlog->[-1]{arrival};
	push @delays, ($at - $arrival) * 1000;
}
@delays = sort { $a <=> $b } @delays;
note(sprintf('await_delivered wake-up after the ack: median %.1f ms, max %.1f ms',
		$delays[ $#delays / 2 ], $delays[-1]));

# An asynchronous commit is not written to WAL yet when the call comes:
# the default still waits for this session's own last commit.
my @unseen;
for my $i (16 .. 20)
{
	my $returned = $node->safe_psql('postgres',
		"SET synchronous_commit = off; INSERT INTO orders VALUES ($i, $i);"
		  . " SELECT replicant.await_delivered('outbox', timeout_ms => 60000)");
	push @unseen, $i unless $returned eq 't' && $sink->dump('public.orders') =~ /"id":$i\b/;
}
is_deeply(\@unseen, [],
	'after an asynchronous commit, await_delivered returns once the sink has the row');

$sink->stop;
my $started = time();
is($node->safe_psql('postgres',
		"INSERT INTO orders VALUES (100, 1); SELECT replicant.await_delivered('outbox', timeout_ms => 1500)"),
	'f', 'await_delivered returns false while the sink is down');
cmp_ok(time() - $started, '>=', 1.4, 'after waiting for the timeout');
$sink->restart;
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('outbox', timeout_ms => 60000)"),
	't', 'and true once the sink is back');

my ($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.await_delivered('nope')");
like($err, qr/pipeline "nope" does not exist/, 'unknown pipeline is an error');
($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.await_delivered('outbox', timeout_ms => -1)");
like($err, qr/timeout_ms must be between/, 'bad timeout is an error');

# 3. Status: latency and the last HTTP status
is($node->safe_psql('postgres',
		'SELECT sink_latency_ms > 0 AND last_http_status = 204 FROM replicant.status'),
	't', 'status shows sink_latency_ms and last_http_status');

# Secret rotation: the previous secret keeps signing until its deadline.
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('outbox', secret => 'whsec_bmV3LXNlY3JldA==',"
	  . " secret_previous_until => now() + interval '1 hour')");
$node->poll_query_until('postgres', "SELECT worker_pid IS NOT NULL FROM replicant.status");
is($node->safe_psql('postgres',
		"INSERT INTO orders VALUES (200, 1); SELECT replicant.await_delivered('outbox', timeout_ms => 60000)"),
	't', 'a sink that knows only the old secret still verifies during the grace period');
$sink->restart(secret => 'whsec_bmV3LXNlY3JldA==');
is($node->safe_psql('postgres',
		"INSERT INTO orders VALUES (201, 1); SELECT replicant.await_delivered('outbox', timeout_ms => 60000)"),
	't', 'a sink that knows only the new secret verifies too');
is($sink->stats->{bad_signatures}, 0, 'no signature was refused');
my @sigs = grep { defined } map { $_->{headers}{'webhook-signature'} } @{ $sink->bodies // [] };
($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.alter_pipeline('outbox', secret_previous_until => now() + interval '1 hour')");
like($err, qr/secret_previous_until needs a new secret/, 'a grace period needs a new secret');

# 410 Gone disables the pipeline instead of retrying.
$sink->control({ fail_status => 410 });
$node->safe_psql('postgres', 'INSERT INTO orders VALUES (300, 1)');
ok($node->poll_query_until('postgres',
		"SELECT state = 'disabled' AND last_error LIKE '%410 Gone%' FROM replicant.status"),
	'410 Gone disables the pipeline with a reason');
is($node->safe_psql('postgres', 'SELECT enabled FROM replicant.pipelines'), 'f', 'and records it');
$sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('outbox')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['orders']),
	'enabled again, nothing was lost');

done_testing();
