# NATS JetStream destination: an initial snapshot (two shard workers
# publishing at once) and a backfill, as "read" changes between their
# markers (issue #36 item 5 (d)).  Every row is read once, its message id
# is unique, the first marker comes before the table's rows and the last
# after them, and the tables in the stream equal the source, with the
# changes streamed meanwhile in commit order.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('S', 'replicant.p.>', duplicates_ms => 2000);

my $node = ReplicantTest::new_node('nats_snapshot');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE s (id int PRIMARY KEY, v text);
	INSERT INTO s SELECT g, repeat('s', g % 50) FROM generate_series(1, 3000) g;
	CREATE TABLE u (id int PRIMARY KEY, v text);
	INSERT INTO u SELECT g, 'u' || g FROM generate_series(1, 500) g;
	CREATE PUBLICATION pub FOR TABLE s;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S')
	  . "', snapshot => 'initial', snapshot_workers => 2, batch_max_bytes => 16384)");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'", 180),
	'the initial snapshot is delivered');
$node->safe_psql('postgres', q{
	UPDATE s SET v = 'changed' WHERE id % 100 = 0;
	DELETE FROM s WHERE id % 250 = 1;
	ALTER PUBLICATION pub ADD TABLE u;
});
my $backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('p', 'u')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'done' FROM replicant.backfill_status WHERE id = $backfill"),
	'the backfill finishes');
$node->safe_psql('postgres', "UPDATE u SET v = 'after' WHERE id <= 10");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'delivered');

my @msgs = $nats->messages('S');
is_deeply([ Nats::problems(\@msgs, 'p') ], [], 'ids unique, changes in commit order');
foreach my $table ('s', 'u')
{
	is_deeply(Nats::table_state(\@msgs, 'public', $table),
		Nats::source_state($node, 'postgres', $table, ['id']), "$table equals the source");
	my @reads = grep { ($_->{headers}{'Replicant-Kind'} // '') eq 'read' && $_->{json}{table} eq $table } @msgs;
	my %ids;
	$ids{ $_->{json}{key}{id} }++ foreach @reads;
	is(scalar(keys %ids), $table eq 's' ? 3000 : 500, "$table: every row read");
	is(scalar(grep { $_ > 1 } values %ids), 0, "$table: no row read twice");
	my @markers = grep { ($_->{headers}{'Replicant-Kind'} // '') eq 'marker' && $_->{json}{snapshot}{table} eq $table } @msgs;
	my ($first) = grep { $_->{json}{snapshot}{first} } @markers;
	my ($last)  = grep { $_->{json}{snapshot}{last} } @markers;
	ok($first && $last, "$table: first and last markers");
	is($first->{subject}, "replicant.p.public.$table", "$table: markers on the table's subject") if $first;
	ok($first && $last && !grep({ $_->{seq} < $first->{seq} || $_->{seq} > $last->{seq} } @reads),
		"$table: every read between the markers");
	like($reads[0]{headers}{'Nats-Msg-Id'}, qr/^p-b\d+-.*:\d+$/, "$table: read ids name the request and the row's place");
}
done_testing();
