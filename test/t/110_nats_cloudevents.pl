# NATS JetStream destination with format => 'cloudevents' (issue #36): each
# message is one CloudEvents event in structured mode (Content-Type
# application/cloudevents+json, as the CloudEvents NATS binding has it), the
# event format 'cloudevents' sends over HTTP, under the subjects, headers and
# Nats-Msg-Ids of format 'replicant'.  Beside it, a pipeline in format
# 'replicant' on the same publication, into a stream of its own.  An initial
# snapshot, a random workload of inserts, updates, deletes and transactional
# messages, a non-transactional message, a backfill, and the worker killed
# (kill -9) between the acknowledgements and the checkpoint, after which the
# stream's duplicate window (100 ms) is long over: the stream read back holds
# every change once, in commit order, equal to the source; every event is
# valid for the official SDK (npm cloudevents), its attributes match its
# headers, and its data is what the replicant pipeline published.  Then
# alter_pipeline switches that pipeline to CloudEvents.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use JSON::PP;
use MIME::Base64;
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

ReplicantTest::require_node('cloudevents');
Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('CE', 'replicant.ce.>', duplicates_ms => 100);
$nats->create_stream('RP', 'replicant.rp.>');

my $node = ReplicantTest::new_node('nats_cloudevents', conf => 'restart_after_crash = on');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text, n bigint);
	INSERT INTO t SELECT g, 'row ' || g, g FROM generate_series(1, 40) g;
	CREATE TABLE log (txn int PRIMARY KEY);
	CREATE TABLE u (id int PRIMARY KEY, v text);
	INSERT INTO u SELECT g, 'u' || g FROM generate_series(1, 30) g;
	CREATE PUBLICATION pub FOR TABLE t, log;
});
my $source = $node->safe_psql('postgres',
	"SELECT '/replicant/' || system_identifier || '/' || (SELECT oid FROM pg_database WHERE datname = 'postgres')"
	  . " FROM pg_control_system()");

sub poll { return ReplicantTest::poll($node, @_); }

# NATS takes format cloudevents now; clickhouse's is still refused (100)
foreach ([ 'ce', 'CE', 'cloudevents' ], [ 'rp', 'RP', 'replicant' ])
{
	my ($name, $stream, $format) = @$_;
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$name', 'pub', '" . $nats->url($stream)
		  . "', snapshot => 'initial', messages => true, http_timeout_ms => 3000, format => '$format')");
}
foreach my $p ('ce', 'rp')
{
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'", 120),
		"$p: the initial snapshot is delivered");
}

srand(110);
my $txns = 0;
sub workload
{
	my ($n) = @_;
	foreach (1 .. $n)
	{
		$txns++;
		my @sql = ("INSERT INTO log VALUES ($txns)");
		foreach (1 .. 1 + int(rand(5)))
		{
			my $id = 1 + int(rand(60));
			my $r  = rand();
			push @sql,
			    $r < 0.45 ? "INSERT INTO t VALUES ($id, 'v$txns', $txns) ON CONFLICT (id) DO UPDATE SET v = excluded.v"
			  : $r < 0.7  ? "UPDATE t SET n = n + 1 WHERE id = $id"
			  : $r < 0.9  ? "DELETE FROM t WHERE id = $id"
			  :             "SELECT pg_logical_emit_message(true, 'app', 'message $txns')";
		}
		$node->safe_psql('postgres', join(";\n", 'BEGIN', @sql, 'COMMIT'));
	}
}

sub delivered
{
	my ($label) = @_;
	foreach my $p ('ce', 'rp')
	{
		ok(poll("SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 1000)", 180),
			"$p: $label delivered");
	}
}

workload(40);
$node->safe_psql('postgres', q{SELECT pg_logical_emit_message(false, 'app', 'on its own')});
delivered('the workload');

# A backfill: its rows between its begin and end events.
$node->safe_psql('postgres', 'ALTER PUBLICATION pub ADD TABLE u');
foreach my $p ('ce', 'rp')
{
	my $id = $node->safe_psql('postgres', "SELECT replicant.backfill('$p', 'u')");
	ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id", 120), "$p: the backfill is done");
}
$node->safe_psql('postgres', q{UPDATE u SET v = 'after' WHERE id <= 5});
workload(10);
delivered('the backfill');

# kill -9 between the acknowledgements and the checkpoint: the worker that
# restarts decodes the acknowledged batch again, and only the mark it reads
# off the last CloudEvents message in the stream keeps it from being written
# twice (the ids left the duplicate window long before the restart is over).
{
	my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'ce'");
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'after_ack:hold'");
	kill 'HUP', $pid;
	workload(10);
	$node->wait_for_log(qr/fault point "after_ack" reached, holding/, $offset);
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point');
	my $checkpoint = $node->safe_psql('postgres',
		"SELECT (checkpoint_lsn - '0/0')::numeric FROM replicant.status WHERE pipeline = 'ce'");
	my ($in_stream) = sort { $b <=> $a }
	  map { $_->{headers}{'Replicant-Commit-Lsn'} // 0 } $nats->messages('CE');
	cmp_ok($in_stream, '>', $checkpoint, 'acknowledged changes beyond the checkpoint are in the stream');
	kill 'KILL', $pid;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	ok(poll("SELECT worker_pid IS NOT NULL FROM replicant.status WHERE pipeline = 'ce'", 120),
		'a worker runs after the crash');
	workload(10);
	delivered('after the crash');
}

# ---- the stream ---------------------------------------------------------------
my @msgs = $nats->messages('CE');
my @problems = Nats::problems(\@msgs, 'ce');
is_deeply([ @problems[ 0 .. ($#problems < 9 ? $#problems : 9) ] ], [], 'every change once, in commit order');
is(scalar(grep { ($_->{headers}{'Content-Type'} // '') eq 'application/cloudevents+json' } @msgs),
	scalar(@msgs), 'every message is Content-Type: application/cloudevents+json');
is(scalar(grep { !$_->{json} } @msgs), 0, 'every body is JSON');

# Every message through the SDK, as a structured-mode event.
my $stdin = join('',
	map {
		encode_json({ webhook_id => $_->{headers}{'Nats-Msg-Id'},
			headers => { 'content-type' => $_->{headers}{'Content-Type'} },
			body_base64 => encode_base64($_->{data}, '') })
		  . "\n"
	} @msgs);
my @parsed = map { decode_json($_) } split /\n/, ReplicantTest::run_node('cloudevents-check.mjs', [], $stdin);
my @errors = grep { $_->{error} } @parsed;
is(scalar(@errors), 0, 'the SDK parses and validates every message') or diag(explain([ @errors[ 0 .. 4 ] ]));
is(scalar(@parsed), scalar(@msgs), 'one event per message (' . scalar(@msgs) . ')');

# Attributes against the headers.
my (%ids, @bad);
my %kinds;
foreach my $m (@msgs)
{
	my ($h, $e) = ($m->{headers}, $m->{json});
	my $kind = $h->{'Replicant-Kind'};
	$kinds{$kind}++;
	push @bad, "$h->{'Nats-Msg-Id'}: source" unless $e->{source} eq "$source/ce";
	push @bad, "$h->{'Nats-Msg-Id'}: id $e->{id} twice" if $ids{ $e->{id} }++;
	if ($kind eq 'change')
	{
		push @bad, "$h->{'Nats-Msg-Id'}: change"
		  unless $e->{type} eq "io.replicant.$e->{data}{op}"
		  && $e->{commitlsn} eq $h->{'Replicant-Commit-Lsn'}
		  && $e->{xid} eq $h->{'Replicant-Xid'}
		  && $e->{id} eq "ce-$e->{commitlsn}-" . ($h->{'Replicant-Position'} - 1)
		  && $e->{subject} eq "public.$e->{data}{table}"
		  && $m->{subject} eq "replicant.ce.public.$e->{data}{table}";
	}
	elsif ($kind eq 'message')
	{
		push @bad, "$h->{'Nats-Msg-Id'}: message"
		  unless $e->{type} eq 'io.replicant.message'
		  && $e->{id} eq "ce-m$e->{data}{lsn}"
		  && $e->{subject} eq 'app'
		  && $m->{subject} eq 'replicant.ce._messages.app';
	}
	elsif ($kind eq 'read')
	{
		push @bad, "$h->{'Nats-Msg-Id'}: read"
		  unless $e->{type} eq 'io.replicant.read'
		  && $e->{id} =~ /^ce-b$e->{backfillid}-[0-9a-f]{32}$/
		  && $m->{subject} eq "replicant.ce.public.$e->{data}{table}";
	}
	elsif ($kind eq 'marker')
	{
		my $which = $h->{'Nats-Msg-Id'} =~ /:first$/ ? 'begin' : 'end';
		push @bad, "$h->{'Nats-Msg-Id'}: marker"
		  unless $e->{type} eq "io.replicant.snapshot.$which"
		  && $e->{id} eq "ce-b$e->{backfillid}-$which"
		  && $m->{subject} eq "replicant.ce.$e->{subject}";
	}
	else
	{
		push @bad, "$h->{'Nats-Msg-Id'}: kind $kind";
	}
}
is_deeply([ @bad[ 0 .. ($#bad < 9 ? $#bad : 9) ] ], [], 'each event\'s attributes match its message\'s headers');
ok($kinds{$_}, "the stream holds $_ messages") foreach qw(change message read marker);

# Markers: the snapshot's and the backfill's begin and end events, around their rows.
foreach my $table ('t', 'u')
{
	my @seq = map { $_->{headers}{'Replicant-Kind'} eq 'marker' ? $_->{json}{type} : 'read' }
	  grep { ($_->{headers}{'Replicant-Kind'} =~ /^(read|marker)$/) && $_->{json}{subject} eq "public.$table" } @msgs;
	my $joined = join(',', @seq);
	like($joined, qr/^io\.replicant\.snapshot\.begin,(read,)+io\.replicant\.snapshot\.end$/,
		"$table: begin event, its rows, end event");
}

# Data: what the replicant pipeline published, in the same order.
my $json = JSON::PP->new->canonical;
my @rp = $nats->messages('RP');
is_deeply([ Nats::problems(\@rp, 'rp') ], [], 'rp: every change once, in commit order');
sub stream_items
{
	my ($list, $data) = @_;
	return map { $json->encode($data->($_)) }
	  grep { $_->{headers}{'Replicant-Kind'} =~ /^(change|message)$/ } @$list;
}
my @ce_items = stream_items(\@msgs, sub { $_[0]{json}{data} });
my @rp_items = stream_items(\@rp,   sub { $_[0]{json} });
is(scalar(@ce_items), scalar(@rp_items), 'as many changes and messages as the replicant pipeline (' . scalar(@ce_items) . ')');
is_deeply(\@ce_items, \@rp_items, "every event's data is the replicant format's change, in the same order");
is_deeply([ sort map { $json->encode($_->{json}{data}) } grep { $_->{headers}{'Replicant-Kind'} eq 'read' } @msgs ],
	[ sort map { $json->encode($_->{json}) } grep { $_->{headers}{'Replicant-Kind'} eq 'read' } @rp ],
	'the rows read are those of the replicant pipeline');

# The tables a consumer applying the events' data holds: the source's.
my @applied = map { { %$_, json => $_->{json}{data} } } grep { $_->{headers}{'Replicant-Kind'} =~ /^(change|read)$/ } @msgs;
foreach my $table ('t', 'u', 'log')
{
	my $key = $table eq 'log' ? 'txn' : 'id';
	is_deeply(Nats::table_state(\@applied, 'public', $table),
		Nats::source_state($node, 'postgres', $table, [$key]), "$table equals the source");
}
my %logged;
$logged{ $_->{json}{new}{txn} }++ foreach grep { $_->{json}{table} eq 'log' } @applied;
is(scalar(keys %logged), $txns, "all $txns transactions are in the stream");
is(scalar(grep { $_ != 1 } values %logged), 0, 'none twice');

# alter_pipeline: the replicant pipeline switches to CloudEvents (not to
# ClickHouse's format); its worker goes on after the last replicant-format
# message, whose headers give the same mark.
my ($rc, $out, $err) = $node->psql('postgres', "SELECT replicant.alter_pipeline('rp', format => 'clickhouse')");
like($err, qr/format "clickhouse" cannot be delivered to NATS/, 'alter_pipeline: clickhouse refused for NATS');
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('rp', format => 'cloudevents')");
workload(5);
ok(poll("SELECT replicant.await_delivered('rp', pg_current_wal_lsn(), 1000)", 180), 'rp: delivered as CloudEvents');
my @after = $nats->messages('RP');
is_deeply([ Nats::problems(\@after, 'rp') ], [], 'rp: every change once, in commit order, across the switch');
my @new = @after[ scalar(@rp) .. $#after ];
ok(@new > 0 && !grep({ ($_->{headers}{'Content-Type'} // '') ne 'application/cloudevents+json'
			  || ($_->{json}{specversion} // '') ne '1.0' } @new),
	'rp: what it publishes after the switch is CloudEvents events (' . scalar(@new) . ')');

is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.status WHERE last_error <> ''"),
	'0', 'no errors');
done_testing();
