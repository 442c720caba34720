# Backfill and snapshot requests honour batch_max_bytes (a 2,000-row chunk
# of wide rows used to be one request), and carry webhook-ids of one
# documented form: <pipeline>-b<backfill id>-<position>-<part> for rows,
# <pipeline>-b<backfill id>-first|last for an initial snapshot's markers.
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
	is(scalar(grep { !/^bw-b$id-\d+-\d+$/ } @ids), 0,
		"$mode: every webhook-id reads bw-b$id-<position>-<part>");
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
is(scalar(grep { !/^bs-b\d+-(\d+-\d+|first|last)$/ } @ids), 0,
	'initial snapshot: every webhook-id reads bs-b<id>-<position>-<part> or bs-b<id>-first|last');
$sink2->stop;
$sink->stop;

done_testing();
