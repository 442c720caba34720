# format => 'cloudevents': every request replicant sends is parsed and
# validated by the official CloudEvents SDK (npm cloudevents, through
# test/js/cloudevents-check.mjs).  Beside it, a pipeline in replicant's own
# format on the same publication: each event's data equals the change that
# pipeline carries.  An initial snapshot, inserts, updates (a key change), a
# delete, transactional and non-transactional messages, a TRUNCATE, a
# re-delivered request (the sink answers too late) and a backfill whose
# chunks carry the begin and end events beside rows.  Then alter_pipeline
# switches the replicant-format pipeline to CloudEvents.  Last, read ids of
# rows the data cannot tell apart (a column list without the primary key; a
# table without identity holding equal rows): one id per row, the same when
# read again, and not that of another row once a rewrite moved the rows.
# And a resync (resync_pipeline) whose begin event is sent twice: its
# snapshot begin and end events carry {"resync": {...}} as their data, under
# the markers' ids, the same when sent again.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use JSON::PP;
use MIME::Base64;
use Time::HiRes qw(time sleep);
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

ReplicantTest::require_node('cloudevents');

my $node = ReplicantTest::new_node('cloudevents');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text, n bigint, tags text[]);
	INSERT INTO t SELECT g, 'row ' || g, g * 1000000000000, ARRAY['a', 'b'] FROM generate_series(1, 5) g;
	CREATE PUBLICATION pub FOR TABLE t;
});
my $source = $node->safe_psql('postgres',
	"SELECT '/replicant/' || system_identifier || '/' || (SELECT oid FROM pg_database WHERE datname = 'postgres')"
	  . " FROM pg_control_system()");
my $json = JSON::PP->new->canonical;

my $ce = ReplicantTest::start_sink(keep_bodies => 1, name => 'ce');
my $rp = ReplicantTest::start_sink(keep_bodies => 1, name => 'rp');
foreach ([ 'ce', $ce, 'cloudevents' ], [ 'rp', $rp, 'replicant' ])
{
	my ($name, $sink, $format) = @$_;
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$name', 'pub', '$sink->{url}', snapshot => 'initial',"
		  . " messages => true, http_timeout_ms => 1000, format => '$format')");
}
foreach my $p ('ce', 'rp')
{
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"$p: the initial snapshot is delivered");
}

sub delivered
{
	my ($label) = @_;
	foreach my $p ('ce', 'rp')
	{
		is($node->safe_psql('postgres',
				"SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 60000)"),
			't', "$p: $label delivered");
	}
	return;
}

my $xid = $node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO t VALUES (6, 'six', 6, '{}');
	UPDATE t SET v = 'one' WHERE id = 1;
	UPDATE t SET id = 7 WHERE id = 2;
	DELETE FROM t WHERE id = 3;
	SELECT pg_logical_emit_message(true, 'app', 'in the transaction');
	SELECT pg_current_xact_id();
	COMMIT;
});
($xid) = $xid =~ /(\d+)\s*$/;
$node->safe_psql('postgres', q{SELECT pg_logical_emit_message(false, 'app', 'on its own')});
$node->safe_psql('postgres', 'TRUNCATE t');
delivered('the changes');

# The sink applies a request but answers after http_timeout_ms: replicant
# sends the same request again.
$ce->control({ delay_ms => 1500 });
$node->safe_psql('postgres', q{INSERT INTO t VALUES (8, 'eight', 8, NULL), (9, 'nine', 9, NULL)});
sub sent_twice
{
	my %seen;
	return scalar(grep { $seen{ $_->{webhook_id} }++ } @{ $ce->raw_bodies });
}
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep 0.2 until sent_twice() || time() > $deadline;
ok(sent_twice(), 'a request is delivered twice');
$ce->control({ clear => 1 });
delivered('the re-delivered insert');

# A backfill in one chunk: begin event, rows, end event in one request.
my $backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('ce', 't', mode => 'keyset')");
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $backfill"),
	'the backfill is done');

# ---- every request, through the SDK ----------------------------------------
my $requests = $ce->raw_bodies;
my @bodies = map { decode_json(decode_base64($_->{body_base64})) } @$requests;
my $stdin = join('', map { encode_json($_) . "\n" } @$requests);
my @parsed = map { decode_json($_) } split /\n/, ReplicantTest::run_node('cloudevents-check.mjs', [], $stdin);
my @errors = grep { $_->{error} } @parsed;
is(scalar(@errors), 0, 'the SDK parses and validates every request') or diag(explain(\@errors));
{
	my %bad = %{ $requests->[0] };
	(my $body = decode_base64($bad{body_base64})) =~ s/"subject":/"Sub-ject":/;
	$bad{body_base64} = encode_base64($body, '');
	my ($verdict) = map { decode_json($_) } split /\n/,
	  ReplicantTest::run_node('cloudevents-check.mjs', [], encode_json(\%bad) . "\n");
	like($verdict->{error} // '', qr/invalid extension name/, 'the check refuses an event the SDK finds invalid');
}
note('a request: ' . decode_base64($requests->[-1]{body_base64}));
my $nevents = 0;
$nevents += scalar(@$_) foreach @bodies;
is(scalar(@parsed), $nevents, "the SDK sees every event ($nevents)");
is(scalar(grep { $_->{headers}{'content-type'} eq 'application/cloudevents-batch+json' } @$requests),
	scalar(@$requests), 'every request is application/cloudevents-batch+json');

# Ids: unique across requests, the same in a re-delivered one.
my (%by_request, %id_count);
foreach my $i (0 .. $#$requests)
{
	my $ids = join(' ', map { $_->{id} } @{ $bodies[$i] });
	my $w = $requests->[$i]{webhook_id};
	if (exists $by_request{$w})
	{
		is($ids, $by_request{$w}, "re-delivered $w has the same event ids");
		is($requests->[$i]{body_base64}, (grep { $_->{webhook_id} eq $w } @$requests)[0]{body_base64},
			"re-delivered $w is the same bytes");
		next;
	}
	$by_request{$w} = $ids;
	$id_count{$_}++ foreach split / /, $ids;
}
is(scalar(grep { $_ > 1 } values %id_count), 0, 'no two requests share an event id');

# Attributes.
my @events = map { @$_ } @bodies;
is(scalar(grep { $_->{source} eq "$source/ce" } @events), scalar(@events),
	'source is /replicant/<system identifier>/<database oid>/<pipeline>');
is(scalar(grep { ($_->{subject} // '') eq 'public.t' } grep { $_->{type} ne 'io.replicant.message' } @events),
	scalar(grep { $_->{type} ne 'io.replicant.message' } @events), 'subject is schema.table');
my ($txn_events) = grep { grep { ($_->{xid} // '') eq $xid } @$_ } @bodies;
my @txn = grep { ($_->{xid} // '') eq $xid } @$txn_events;
is(join(',', map { $_->{type} } @$txn_events),
	'io.replicant.insert,io.replicant.update,io.replicant.update,io.replicant.delete,io.replicant.message',
	'one event per change, then the messages, with their types');
my $lsn = $txn[0]{commitlsn};
like($lsn, qr/^\d+$/, 'commitlsn is the commit LSN as a decimal string');
is(join(',', map { $_->{id} } @txn), join(',', map { "ce-$lsn-$_" } 0 .. 3),
	'stream ids are <pipeline>-<commitlsn>-<index in the transaction>');
is(scalar(grep { $_->{commitlsn} eq $lsn && $_->{time} =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/ } @txn), 4,
	'every change has the commit LSN and an RFC 3339 commit time');
is($txn_events->[-1]{subject}, 'app', "a message's subject is its prefix");
is(scalar(grep { $_->{type} eq 'io.replicant.truncate' } @events), 1, 'the TRUNCATE is an event');
is(scalar(grep { $_->{type} eq 'io.replicant.message' } @events), 2, 'both messages are events');

# Snapshot markers: the initial snapshot's own requests, and a backfill's.
my @markers = grep { $_->{type} =~ /^io\.replicant\.snapshot\./ } @events;
is(join(',', map { $_->{type} } @markers),
	join(',', ('io.replicant.snapshot.begin', 'io.replicant.snapshot.end') x 2),
	'a begin and an end event for the snapshot and for the backfill');
my ($chunk) = grep { @$_ > 2 && $_->[0]{type} eq 'io.replicant.snapshot.begin' } @bodies;
ok($chunk && $chunk->[-1]{type} eq 'io.replicant.snapshot.end'
	  && !grep({ $_->{type} ne 'io.replicant.read' } @$chunk[ 1 .. $#$chunk - 1 ]),
	"the backfill's request: begin event, its rows, end event");
like($chunk->[1]{id} // '', qr/^ce-b$backfill-[0-9a-f]{32}$/, 'a read id is <pipeline>-b<backfill>-<key digest>');
is($chunk->[1]{backfillid}, $backfill, 'reads carry backfillid');

# Data: exactly what the replicant format carries, in the same order.
sub canon_list { return join("\n", map { $json->encode($_) } @_); }
my $replicant = $rp->bodies;
my @rp_changes = map {
	my $b = $_->{body};
	$b->{kind} eq 'snapshot'
	  ? @{ $b->{changes} }
	  : map { (@{ $_->{changes} }, @{ $_->{messages} // [] }) } @{ $b->{transactions} }
} grep { $_->{body}{kind} ne 'message' } @$replicant;
my @ce_data = map { $_->{data} } grep { $_->{type} !~ /snapshot/ } map { @$_ } grep {
	!($_->[0]{backfillid} // '') || $_->[0]{backfillid} ne $backfill
} map { $bodies[$_] } grep { $requests->[$_]{webhook_id} !~ /-m\d+$/ } 0 .. $#bodies;
# The re-delivered request counts once on each side.
my %once;
@ce_data = grep { !$once{ $json->encode($_) }++ } @ce_data;
my %once_rp;
@rp_changes = grep { !$once_rp{ $json->encode($_) }++ } @rp_changes;
is(canon_list(@ce_data), canon_list(@rp_changes), "every event's data is the replicant format's change");
my ($alone) = grep { $_->{body}{kind} eq 'message' } @$replicant;
my ($ce_alone) = grep { $_->{type} eq 'io.replicant.message' && $_->{id} eq "ce-m$alone->{body}{message}{lsn}" } @events;
is($json->encode($ce_alone->{data} // {}), $json->encode($alone->{body}{message}),
	'a non-transactional message is its own request, with the same data');

# ---- alter_pipeline: a pipeline changes its format -------------------------
my ($rc, $out, $err) = $node->psql('postgres', "SELECT replicant.alter_pipeline('rp', format => 'json')");
like($err, qr/ERROR:  unknown format "json"\nHINT:  The formats are "replicant", "cloudevents", "clickhouse"/,
	'an unknown format is refused, naming the formats');
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('rp', format => 'cloudevents')");
$node->safe_psql('postgres', q{INSERT INTO t VALUES (10, 'ten', 10, NULL)});
delivered('the insert after the alter');
my $last = $rp->raw_bodies->[-1];
is($last->{headers}{'content-type'}, 'application/cloudevents-batch+json', 'after the alter: CloudEvents');
my ($verdict) = map { decode_json($_) } split /\n/,
  ReplicantTest::run_node('cloudevents-check.mjs', [], encode_json($last) . "\n");
is($verdict->{event}{type} // $verdict->{error}, 'io.replicant.insert', '... which the SDK validates');
like($node->safe_psql('postgres', 'SELECT * FROM replicant.pipeline_definitions()'),
	qr/'rp'.*format => 'cloudevents'\);/, 'pipeline_definitions shows the format');

# ---- read ids tell apart rows the data cannot -------------------------------
# users publishes plan alone (inserts only): its rows read with key null
# and the same data, yet each has its own id, a digest of its whole replica
# identity under a secret key of the pipeline, which reveals nothing of it.
# log has no identity at all and two equal rows: two ids, digests of where
# the rows are.  A second read of the same rows (a backfill) has the same
# digests: ids are stable across reads.
$node->safe_psql('postgres', q{
	CREATE TABLE users (email text PRIMARY KEY, plan text);
	CREATE PUBLICATION pub_users FOR TABLE users (plan) WITH (publish = 'insert');
	INSERT INTO users VALUES ('ann@example.com', 'free'), ('bob@example.com', 'free'),
	                         ('cid@example.com', 'free');
	CREATE TABLE log (line text);
	CREATE PUBLICATION pub_log FOR TABLE log WITH (publish = 'insert');
	INSERT INTO log VALUES ('same'), ('same');
});
my $ceu = ReplicantTest::start_sink(keep_bodies => 1, name => 'ceu');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ceu', ARRAY['pub_users', 'pub_log'], '$ceu->{url}',"
	  . " snapshot => 'initial', format => 'cloudevents')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ceu'"),
	'ceu: the initial snapshot is delivered');
my @ceu_backfills = map { $node->safe_psql('postgres', "SELECT replicant.backfill('ceu', '$_')") } qw(users log);
ok(ReplicantTest::poll($node,
		"SELECT count(*) = 2 FROM replicant.backfill_status WHERE state = 'done' AND id IN ("
		  . join(',', @ceu_backfills) . ')'),
	'ceu: the backfills are done');
my (%ceu_reads, %ceu_seen);
foreach my $e (map { @{ decode_json(decode_base64($_->{body_base64})) } }
	grep { !$ceu_seen{ $_->{webhook_id} }++ } @{ $ceu->raw_bodies })
{
	push @{ $ceu_reads{ $e->{subject} }{ $e->{backfillid} } }, $e->{id} if $e->{type} eq 'io.replicant.read';
}
foreach my $t ([ 'public.users', 3 ], [ 'public.log', 2 ])
{
	my ($subject, $rows) = @$t;
	my @reads = map { $ceu_reads{$subject}{$_} } sort { $a <=> $b } keys %{ $ceu_reads{$subject} // {} };
	is(scalar(@reads), 2, "$subject: read by the snapshot and by a backfill");
	foreach my $ids (@reads)
	{
		my %distinct = map { $_ => 1 } @$ids;
		is(scalar(keys %distinct), $rows, "$subject: each of its $rows rows has its own read id")
		  or diag(join(' ', @$ids));
	}
	my @digests = map { join(' ', sort map { s/^ceu-b\d+-//r } @$_) } @reads;
	is($digests[1], $digests[0], "$subject: the backfill reads each row with the snapshot's digest");
}
unlike(join(' ', map { @$_ } map { values %$_ } values %ceu_reads), qr/ann|bob|cid/,
	'no read id holds a value');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ceu')");
$ceu->stop;

$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ce'); SELECT replicant.drop_pipeline('rp')");
$ce->stop;
$rp->stop;

# ---- read ids stay unique across a rewrite ----------------------------------
# A ctid backfill of a table without identity reads a first chunk, then the
# table's first rows go and VACUUM FULL moves the others down into their
# places: the backfill reads the rewritten table again from its first block
# under the same backfill id.  Rows now at the positions read before are
# other rows; their ids must differ from the first read's (a consumer may
# drop an event whose source and id it has seen).  The worker is held
# before its second chunk: first at its first chunk's read, then, while
# the setting moves on, at its table lock, then before the next read.
sub fault_point { return ReplicantTest::set_fault_point($node, $_[0]); }
$node->safe_psql('postgres', q{
	CREATE TABLE kl (v int NOT NULL, pad text NOT NULL);
	INSERT INTO kl SELECT g, repeat('x', 100) FROM generate_series(1, 5000) g;
	CREATE PUBLICATION kl_pub FOR TABLE kl WITH (publish = 'insert, truncate');
});
my $cek = ReplicantTest::start_sink(keep_bodies => 1, name => 'cek');
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('kl', 'kl_pub', '$cek->{url}', format => 'cloudevents')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'kl'"),
	'kl: streams');
my $offset = -s $node->logfile;
fault_point('backfill_read:hold');
my $kl_backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('kl', 'kl', mode => 'ctid')");
$node->wait_for_log(qr/fault point "backfill_read" reached, holding/, $offset);
$offset = -s $node->logfile;
fault_point('backfill_chunk:hold');
$node->wait_for_log(qr/fault point "backfill_chunk" reached, holding/, $offset);
$offset = -s $node->logfile;
fault_point('backfill_read:hold');
$node->wait_for_log(qr/fault point "backfill_read" reached, holding/, $offset);
ok($node->safe_psql('postgres', "SELECT rows_done > 0 AND state <> 'done' FROM replicant.backfill_status WHERE id = $kl_backfill") eq 't',
	'kl: a first chunk was delivered, the backfill goes on');
$node->safe_psql('postgres', 'DELETE FROM kl WHERE v <= 2500');
$node->safe_psql('postgres', 'VACUUM FULL kl');
fault_point(undef);
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $kl_backfill"),
	'kl: the backfill ends');
ok($node->log_contains(qr/was rewritten during its backfill; reading it again/, $offset),
	'kl: the backfill read the rewritten table again');
# Every request: the chunks read again after the rewrite reuse the webhook
# ids of the first read's.
my %rows_of_id;
foreach my $e (map { @{ decode_json(decode_base64($_->{body_base64})) } } @{ $cek->raw_bodies })
{
	$rows_of_id{ $e->{id} }{ $e->{data}{new}{v} } = 1 if $e->{type} eq 'io.replicant.read';
}
my @shared = grep { keys %{ $rows_of_id{$_} } > 1 } keys %rows_of_id;
is(scalar(@shared), 0, 'read_id_unique: no event id names two different rows');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('kl')");
$cek->stop;

# ---- a resync's begin and end events ----------------------------------------
# resync_pipeline() while the sink answers too late (the first marker, the
# probe, is sent twice): the resync's snapshot begin and end events carry
# data {"resync": {reason, lost_from, lost_to}}, under the ids of any
# snapshot marker (<pipeline>-b<backfill_id>-begin/-end), the same when sent
# again; the SDK validates every request.
my $cer = ReplicantTest::start_sink(keep_bodies => 1, name => 'cer');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('cer', 'pub', '$cer->{url}', format => 'cloudevents', http_timeout_ms => 1000)");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'cer'"),
	'cer: streams');
$node->safe_psql('postgres', "INSERT INTO t VALUES (900, 'before the resync', 1, '{}')");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('cer', pg_current_wal_lsn(), 60000)"),
	't', 'cer: delivered before the resync');
my $cer_from = $node->safe_psql('postgres',
	"SELECT checkpoint_lsn FROM replicant.status WHERE pipeline = 'cer'");
$cer->control({ delay_ms => 1500 });
$node->safe_psql('postgres', "SELECT replicant.resync_pipeline('cer')");
ok(ReplicantTest::poll($node, "SELECT retries > 0 FROM replicant.status WHERE pipeline = 'cer'"),
	'cer: the probe is retried');
$cer->control({ clear => 1 });
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'cer'"),
	'cer: resynced, streaming again');
my $cer_requests = $cer->raw_bodies;
my @cer_checked = map { decode_json($_) } split /\n/,
  ReplicantTest::run_node('cloudevents-check.mjs', [], join('', map { encode_json($_) . "\n" } @$cer_requests));
is(join(' ', map { $_->{error} } grep { $_->{error} } @cer_checked), '',
	'cer: the SDK validates every request of the resync');
my (%cer_markers, %cer_copies);
foreach my $r (@$cer_requests)
{
	foreach my $e (@{ decode_json(decode_base64($r->{body_base64})) })
	{
		next unless $e->{type} =~ /^io\.replicant\.snapshot\.(begin|end)$/ && $e->{data};
		$cer_copies{ $e->{id} }{ $json->encode($e->{data}) } = 1;
		push @{ $cer_markers{$1} }, $e;
	}
}
my ($begin, $end) = map { $cer_markers{$_}[0] } qw(begin end);
cmp_ok(scalar @{ $cer_markers{begin} // [] }, '>', 1, 'cer: the begin event was sent again');
like($begin->{id}, qr/^cer-b(\d+)-begin$/, 'cer: the begin id is the marker id');
(my $end_id = $begin->{id}) =~ s/-begin$/-end/;
is($end->{id}, $end_id, 'cer: the end event names the same backfill');
is(scalar(grep { keys %{ $cer_copies{$_} } > 1 } keys %cer_copies), 0,
	'cer: an event sent again has the same id and data');
is($begin->{datacontenttype}, 'application/json', 'cer: the data is JSON');
is($begin->{data}{resync}{reason}, 'requested', 'cer: reason');
is($begin->{data}{resync}{lost_from}, $cer_from, 'cer: lost_from is the checkpoint the sink acknowledged');
is($begin->{data}{resync}{lost_to}, undef, 'cer: lost_to is null on begin');
like($end->{data}{resync}{lost_to}, qr{^[0-9A-F]+/[0-9A-F]+$}, 'cer: lost_to on end is the consistent point');
is($end->{data}{resync}{lost_from}, $cer_from, 'cer: lost_from on end too');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('cer')");
$cer->stop;

$node->stop;
done_testing();
