# Backfill and snapshot requests honour batch_max_bytes (a 2,000-row chunk
# of wide rows used to be one request), and carry webhook-ids of one
# documented form: <pipeline>-b<backfill id>-<position>-<read>-<part> for
# rows (a read by blocks, ctid and the initial snapshot, has the position
# <relfilenode>_<block>), <pipeline>-b<backfill id>-first|last for an initial
# snapshot's markers; a rewrite mid-read, a keyset chunk whose rows the
# stream all changed while it was read, and a chunk or window read again
# after part of it was acknowledged give no webhook-id to two different
# bodies, nor to rows a sink dropping seen webhook-ids would lose.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $LIMIT = 65536;
my $node = ReplicantTest::new_node('bf_batches');
# A request larger than the limit (plus one row's worth) is refused.
my $sink = ReplicantTest::start_sink(max_body => $LIMIT + 8192);

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE wide (id int PRIMARY KEY, doc text NOT NULL);
	ALTER TABLE wide ALTER COLUMN doc SET STORAGE EXTERNAL;
	INSERT INTO wide SELECT g, repeat(md5(g::text), 100) FROM generate_series(1, 3000) g;
	ANALYZE;
	CREATE PUBLICATION wide_pub FOR TABLE wide;
});

sub ids_of
{
	my ($s, $kind) = @_;
	return map { $_->{webhook_id} } grep { $_->{kind} eq $kind } @{ $s->stats->{accepted} };
}

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('bw', 'wide_pub', '$sink->{url}', batch_max_bytes => $LIMIT)");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'bw'"),
	'bw streams');
for my $mode ('keyset', 'ctid', 'bitmap')
{
	my $id = $node->safe_psql('postgres', "SELECT replicant.backfill('bw', 'wide', mode => '$mode')");
	ok(ReplicantTest::poll($node,
			"SELECT state IN ('done') OR (SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'bw')"
			  . " FROM replicant.backfill_status WHERE id = $id", 120),
		"$mode: backfill ends");
	is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'bw'"),
		'streaming', "backfill_chunk_ignores_batch_max_bytes ($mode): no request was too large for the sink");
	is($node->safe_psql('postgres', "SELECT state FROM replicant.backfill_status WHERE id = $id"),
		'done', "$mode: backfill done");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['wide'], 30),
		"$mode: the sink equals the source");
	my @ids = grep { /-b$id-/ } ids_of($sink, 'snapshot');
	ok(@ids > 3, "$mode: the rows took several requests (" . scalar(@ids) . ")");
	my $position = $mode eq 'ctid' ? '\d+_\d+' : '\d+';
	is(scalar(grep { !/^bw-b$id-$position-\d+-\d+$/ } @ids), 0,
		"$mode: every webhook-id reads bw-b$id-<position>-<read>-<part>");
	my %seen;
	is(scalar(grep { $seen{$_}++ } @ids), 0, "$mode: no two requests share a webhook-id");
	last if $node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'bw'") ne 'streaming';
}

# The initial snapshot of a second pipeline, with the same limit.
my $sink2 = ReplicantTest::start_sink(name => 'initial', max_body => $LIMIT + 8192);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('bs', 'wide_pub', '$sink2->{url}', snapshot => 'initial', batch_max_bytes => $LIMIT)");
ok(ReplicantTest::poll($node,
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'bs'", 120),
	'initial snapshot within batch_max_bytes finishes');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink2, ['wide'], 30),
	'initial snapshot: the sink equals the source');
my @ids = ids_of($sink2, 'snapshot');
is(scalar(grep { !/^bs-b\d+-(\d+_\d+-\d+-\d+|first|last)$/ } @ids), 0,
	'initial snapshot: every webhook-id reads bs-b<id>-<relfilenode>_<block>-<read>-<part> or bs-b<id>-first|last');
$sink2->stop;
$sink->stop;

# ---- a rewrite mid-read: no webhook-id names two different bodies ----------
# A table rewritten while it is read is read again from its first block
# under the same backfill id; the windows and chunks read again hold other
# rows at the same positions.  A sink that drops a request whose webhook-id
# it has seen (as Standard Webhooks recommends) would lose them if their
# requests reused the first read's ids.  Rows are five to a block
# (fillfactor 10); the fault points place the rewrite after the first
# window (initial snapshot) or chunk (ctid backfill) was delivered.
sub fault_point { return ReplicantTest::set_fault_point($node, $_[0]); }

# Webhook-ids of the sink's requests that carried two different bodies.
sub ids_of_two_bodies
{
	my ($s) = @_;
	my %bodies;
	$bodies{ $_->{webhook_id} }{ $_->{body_base64} } = 1 foreach @{ $s->raw_bodies };
	return sort grep { keys %{ $bodies{$_} } > 1 } keys %bodies;
}

my $rw_sink = ReplicantTest::start_sink(name => 'rewrite', keep_bodies => 1);
$node->safe_psql('postgres', q{
	CREATE TABLE rw (id int PRIMARY KEY, pad text NOT NULL)
	  WITH (fillfactor = 10, autovacuum_enabled = off);
	ALTER TABLE rw ALTER COLUMN pad SET STORAGE PLAIN;
	INSERT INTO rw SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 15000) g;
	-- dead rows the snapshot does not see, which the rewrite removes
	DELETE FROM rw WHERE id % 2 = 0;
	CREATE PUBLICATION rw_pub FOR TABLE rw;
});
cmp_ok($node->safe_psql('postgres', "SELECT pg_relation_size('rw') / 8192"), '>', 2048,
	'premise: rw spans more than two snapshot windows');

# The initial snapshot: its shard worker is held after its first window.
my $offset = -s $node->logfile;
fault_point('snapshot_window:hold');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('rs', 'rw_pub', '$rw_sink->{url}', snapshot => 'initial', snapshot_workers => 1)");
$node->wait_for_log(qr/fault point "snapshot_window" reached, holding/, $offset);
$offset = -s $node->logfile;
$node->safe_psql('postgres', 'VACUUM FULL rw');
fault_point(undef);
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rs'", 120),
	'rs: the initial snapshot ends');
ok($node->log_contains(qr/table "rw" was rewritten during the snapshot; reading it again/, $offset),
	'rs: the snapshot read the rewritten table again');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $rw_sink, ['rw'], 30),
	'rs: the sink equals the source');
my @shared = ids_of_two_bodies($rw_sink);
is(scalar(@shared), 0, 'rewrite_snapshot_ids: no webhook-id of the snapshot names two different bodies')
  or diag(join(' ', grep { defined } @shared[0 .. 4]));

# A ctid backfill: held before its second chunk, as in 064_cloudevents.pl.
fault_point('backfill_read:hold');
my $rw_backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('rs', 'rw', mode => 'ctid')");
$node->wait_for_log(qr/fault point "backfill_read" reached, holding/, $offset);
$offset = -s $node->logfile;
fault_point('backfill_chunk:hold');
$node->wait_for_log(qr/fault point "backfill_chunk" reached, holding/, $offset);
$offset = -s $node->logfile;
fault_point('backfill_read:hold');
$node->wait_for_log(qr/fault point "backfill_read" reached, holding/, $offset);
is($node->safe_psql('postgres',
		"SELECT rows_done > 0 AND state <> 'done' FROM replicant.backfill_status WHERE id = $rw_backfill"),
	't', 'rs: a first chunk was delivered, the backfill goes on');
$node->safe_psql('postgres', 'DELETE FROM rw WHERE id <= 3000');
$node->safe_psql('postgres', 'VACUUM FULL rw');
fault_point(undef);
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $rw_backfill"),
	'rs: the backfill ends');
ok($node->log_contains(qr/table "rw" was rewritten during its backfill; reading it again/, $offset),
	'rs: the backfill read the rewritten table again');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $rw_sink, ['rw'], 30),
	'rs: the sink equals the source after the backfill');
@shared = ids_of_two_bodies($rw_sink);
is(scalar(@shared), 0, 'rewrite_backfill_ids: no webhook-id of the backfill names two different bodies')
  or diag(join(' ', grep { defined } @shared[0 .. 4]));
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rs')");
$rw_sink->stop;

# ---- a keyset chunk the stream emptied: no webhook-id names two bodies -----
# A keyset chunk's position is the number of rows delivered before it.  The
# stream changes every row of the first chunk while it is read (held at
# backfill_window: its snapshot taken, no row read), so the collision check
# drops them all and the chunk has nothing left to deliver; the next chunk
# starts at the same position.  An empty request for the first chunk would
# share its webhook-id with the second chunk's first request, which carries
# rows: a sink that drops seen webhook-ids would lose them.  The backfill
# still sends exactly one first and one last marker.
sub markers_of
{
	my ($s, $id) = @_;
	my @snap = grep { $_->{kind} eq 'snapshot' && $_->{snapshot}{backfill_id} == $id } @{ $s->stats->{accepted} };
	return (scalar(grep { $_->{snapshot}{first} } @snap), scalar(grep { $_->{snapshot}{last} } @snap));
}

my $ks_sink = ReplicantTest::start_sink(name => 'emptied', keep_bodies => 1);
$node->safe_psql('postgres', q{
	CREATE TABLE ks (id int PRIMARY KEY, v int NOT NULL);
	INSERT INTO ks SELECT g, g FROM generate_series(1, 2500) g;
	CREATE PUBLICATION ks_pub FOR TABLE ks;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('ks', 'ks_pub', '$ks_sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ks'"),
	'ks streams');
$offset = -s $node->logfile;
fault_point('backfill_window:hold');
my $ks_backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('ks', 'ks', mode => 'keyset')");
$node->wait_for_log(qr/fault point "backfill_window" reached, holding/, $offset);
# The first chunk is the first 2,000 rows by key (REPLICANT_CHUNK_ROWS; they
# are far below batch_max_bytes, which also ends a keyset chunk).
$node->safe_psql('postgres', 'UPDATE ks SET v = v + 1 WHERE id <= 2000');
fault_point(undef);
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $ks_backfill"),
	'ks: the backfill ends');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $ks_sink, ['ks'], 30), 'ks: the sink equals the source');
@shared = ids_of_two_bodies($ks_sink);
is(scalar(@shared), 0, 'emptied_chunk_ids: no webhook-id of a keyset backfill names two different bodies')
  or diag(join(' ', grep { defined } @shared[0 .. 4]));
is(join(',', markers_of($ks_sink, $ks_backfill)), '1,1', 'emptied_chunk_ids: one first and one last marker');
is($node->safe_psql('postgres', "SELECT rows_done FROM replicant.backfill_status WHERE id = $ks_backfill"),
	'500', 'emptied_chunk_ids: rows_done counts the 500 rows the backfill delivered');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ks')");
$ks_sink->stop;

# A published TRUNCATE issued while the first chunk holds its snapshot: it
# cannot empty the chunk (replicant_chunk_drop_all), since it waits for the
# table's lock, which the chunk holds from before its low watermark until its
# transaction ends after its high watermark.  The chunk's rows go out, then
# the TRUNCATE, then a last chunk without rows; no webhook-id names two
# bodies either way.
$ks_sink = ReplicantTest::start_sink(name => 'truncated', keep_bodies => 1);
$node->safe_psql('postgres', q{
	CREATE TABLE kt (id int PRIMARY KEY, v int NOT NULL);
	INSERT INTO kt SELECT g, g FROM generate_series(1, 2500) g;
	CREATE PUBLICATION kt_pub FOR TABLE kt;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('kt', 'kt_pub', '$ks_sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'kt'"),
	'kt streams');
$offset = -s $node->logfile;
fault_point('backfill_window:hold');
$ks_backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('kt', 'kt', mode => 'keyset')");
$node->wait_for_log(qr/fault point "backfill_window" reached, holding/, $offset);
my $truncate = $node->background_psql('postgres');
$truncate->query_until(qr/truncating/, "\\echo truncating\nTRUNCATE kt;\n");
ok(ReplicantTest::poll($node, q{
	SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	                WHERE NOT l.granted AND l.relation = 'kt'::regclass AND a.query = 'TRUNCATE kt;')}),
	'kt: the TRUNCATE waits for the chunk holding its snapshot');
fault_point(undef);
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $ks_backfill"),
	'kt: the backfill ends');
$truncate->quit;
is($node->safe_psql('postgres', 'SELECT count(*) FROM kt'), '0', 'kt: the source is empty');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $ks_sink, ['kt'], 30), 'kt: the sink equals the source');
@shared = ids_of_two_bodies($ks_sink);
is(scalar(@shared), 0, 'truncated_chunk_ids: no webhook-id of a keyset backfill names two different bodies')
  or diag(join(' ', grep { defined } @shared[0 .. 4]));
is(join(',', markers_of($ks_sink, $ks_backfill)), '1,1', 'truncated_chunk_ids: one first and one last marker');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('kt')");
$ks_sink->stop;


# ---- a chunk read again after part of it was acknowledged ------------------
# A chunk delivered in several requests whose worker restarts after its first
# request was acknowledged, before the chunk's progress is recorded, is read
# again.  A row deleted meanwhile from the first request's range moves the
# parts' boundaries: a row the first read sent in its second request (never
# acknowledged) now travels in the first.  The second read's requests must
# not reuse the first read's webhook-ids, or a sink that drops a request
# whose webhook-id it has applied (as Standard Webhooks suggests) loses that
# row.  Rows 1-5 take about 1,060 bytes each in a request, row 6 about 7,060,
# batch_max_bytes is 12,000: the first read's first request holds rows 1-5
# (about 5,500 bytes), its second row 6 (about 7,300), which the sink refuses
# as too large, halting the pipeline; without row 1 the read again holds rows
# 2-6 in its first request.

# The rows a sink that drops a request whose webhook-id it applied already
# lacks, and the requests it saw.
sub rows_kept_by_id_dedup
{
	my ($s, $table) = @_;
	my (%applied_id, %got, @log);
	foreach my $b (@{ $s->bodies })
	{
		next unless ($b->{body}{kind} // '') eq 'snapshot';
		my @ids = map { $_->{key}{id} } @{ $b->{body}{changes} // [] };
		push @log, "$b->{webhook_id}: [@ids]" . ($applied_id{ $b->{webhook_id} } ? ' (dropped: id seen)' : '');
		next if $applied_id{ $b->{webhook_id} }++;
		$got{$_} = 1 foreach @ids;
	}
	my @missing = grep { !$got{$_} } split /\n/, $node->safe_psql('postgres', "SELECT id FROM $table ORDER BY id");
	return ("@missing", join("\n", @log));
}

my $rr_sink = ReplicantTest::start_sink(name => 'reread', keep_bodies => 1, max_body => 6400);
$node->safe_psql('postgres', q{
	CREATE TABLE kr (id int PRIMARY KEY, v text NOT NULL);
	ALTER TABLE kr ALTER COLUMN v SET STORAGE EXTERNAL;
	INSERT INTO kr SELECT g, repeat('x', CASE WHEN g = 6 THEN 7000 ELSE 1000 END)
	  FROM generate_series(1, 6) g;
	CREATE PUBLICATION kr_pub FOR TABLE kr;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('kr', 'kr_pub', '$rr_sink->{url}', batch_max_bytes => 12000)");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'kr'"),
	'kr streams');
my $rr_backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('kr', 'kr', mode => 'keyset')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'kr'"),
	'kr: the sink refused the second request of the chunk (HTTP 413)');
is(join(' ', map { join(',', map { $_->{key}{id} } @{ $_->{body}{changes} }) }
		grep { ($_->{body}{kind} // '') eq 'snapshot' && @{ $_->{body}{changes} // [] } } @{ $rr_sink->bodies }),
	'1,2,3,4,5', 'kr: the first request of the chunk, rows 1-5, was acknowledged');
$node->safe_psql('postgres', 'DELETE FROM kr WHERE id = 1');
$rr_sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('kr')");
ok(ReplicantTest::poll($node, "SELECT state = 'done' FROM replicant.backfill_status WHERE id = $rr_backfill"),
	'kr: the backfill ends');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $rr_sink, ['kr'], 30),
	'kr: the sink, applying every request, equals the source');
my ($missing, $log) = rows_kept_by_id_dedup($rr_sink, 'kr');
is($missing, '', 'reread_chunk_ids: a sink dropping the webhook-ids it applied has every backfilled row')
  or diag($log);
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('kr')");
$rr_sink->stop;

# The same for a window of an initial snapshot: the shard worker's second
# request of the window is refused, the pipeline halts before the window's
# progress is recorded, and the window is read again after the resume.
$rr_sink = ReplicantTest::start_sink(name => 'reread_window', keep_bodies => 1, max_body => 6400);
$node->safe_psql('postgres', q{
	CREATE TABLE kw (id int PRIMARY KEY, v text NOT NULL);
	ALTER TABLE kw ALTER COLUMN v SET STORAGE EXTERNAL;
	INSERT INTO kw SELECT g, repeat('x', CASE WHEN g = 6 THEN 7000 ELSE 1000 END)
	  FROM generate_series(1, 6) g;
	CREATE PUBLICATION kw_pub FOR TABLE kw;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('kw', 'kw_pub', '$rr_sink->{url}', batch_max_bytes => 12000,"
	  . " snapshot => 'initial')");
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'kw'"),
	'kw: the sink refused the second request of the window (HTTP 413)');
is(join(' ', map { join(',', map { $_->{key}{id} } @{ $_->{body}{changes} }) }
		grep { ($_->{body}{kind} // '') eq 'snapshot' && @{ $_->{body}{changes} // [] } } @{ $rr_sink->bodies }),
	'1,2,3,4,5', 'kw: the first request of the window, rows 1-5, was acknowledged');
$node->safe_psql('postgres', 'DELETE FROM kw WHERE id = 1');
$rr_sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('kw')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'kw'", 120),
	'kw: the initial snapshot ends');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $rr_sink, ['kw'], 30),
	'kw: the sink, applying every request, equals the source');
($missing, $log) = rows_kept_by_id_dedup($rr_sink, 'kw');
is($missing, '', 'reread_window_ids: a sink dropping the webhook-ids it applied has every snapshot row')
  or diag($log);
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('kw')");
$rr_sink->stop;

done_testing();
