# A batch body larger than replicant.batch_memory_limit moves to a temporary
# file and is uploaded from it, so the worker's memory stays bounded whatever
# a transaction's size.  With the limit at its 64kB minimum:
#
#   - one 20,000-row transaction (about 2 MB of JSON) arrives whole, in one
#     request, every row once, and the worker held it in a temporary file
#     (log_temp_files = 0 logs the file once the batch is done with it);
#   - a sink that refuses the first attempts gets the same transaction again:
#     each retry reads the file from its start;
#   - spilled transactions that pile up while the sink is away leave
#     together, each whole.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('spill',
	conf => "replicant.batch_memory_limit = '64kB'\nlog_temp_files = 0");
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'pipeline streams');
is($node->safe_psql('postgres', 'SHOW replicant.batch_memory_limit'), '64kB',
	'batch_memory_limit is 64kB');
my $worker = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");

sub status { return $node->safe_psql('postgres', "SELECT $_[0] FROM replicant.status WHERE pipeline = 'p'"); }

# The requests the sink accepted from the $from-th on.
sub accepted_since
{
	my ($from) = @_;
	my @all = @{ $sink->stats->{accepted} };
	return @all[ $from .. $#all ];
}

# ---- one large transaction -------------------------------------------------
my $offset = -s $node->logfile;
my $requests = scalar @{ $sink->stats->{accepted} };
$node->safe_psql('postgres',
	"INSERT INTO t SELECT g, repeat(md5(g::text), 2) FROM generate_series(1, 20000) g");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']),
	'large: the sink equals the source');
my @accepted = accepted_since($requests);
is(scalar @accepted, 1, 'large: one request');
is($accepted[0]{changes}, 20000, 'large: all 20,000 changes in it');
my $counts = $sink->deliveries('public.t');
is(scalar(grep { $_ != 1 } values %$counts), 0, 'large: every row delivered once');
my $spilled = qr/\[$worker\] LOG:  temporary file: path "[^"]+", size (\d+)/;
ok(defined eval { $node->wait_for_log($spilled, $offset) },
	'large: the worker held the batch in a temporary file');
my ($size) = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset) =~ $spilled;
cmp_ok($size // 0, '>', 1024 * 1024, 'large: of more than 1 MB, far above the 64kB limit');

# ---- a refused spilled batch is sent again from the start of its file ------
$sink->control({ fail_first => 3 });
my $retries = status('retries');
my $txns = scalar @{ $sink->txlog };
$node->safe_psql('postgres', q{UPDATE t SET v = v || 'x' WHERE id <= 10000});
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']),
	'retried: the sink equals the source');
is(status("retries >= $retries + 3"), 't', 'retried: after three refusals');
my @txlog = @{ $sink->txlog };
is_deeply([ map { $_->{nchanges} } @txlog[ $txns .. $#txlog ] ], [10000],
	'retried: the transaction arrived once, whole');
$sink->control({ clear => 1 });

# ---- spilled transactions that piled up leave together ---------------------
$sink->control({ fail_status => 503 });
$retries = status('retries');
$txns = scalar @{ $sink->txlog };
$requests = scalar @{ $sink->stats->{accepted} };
foreach my $k (1 .. 4)
{
	$node->safe_psql('postgres',
		"INSERT INTO t SELECT g, repeat(md5(g::text), 2) FROM generate_series($k * 100000, $k * 100000 + 4999) g");
}
ok(ReplicantTest::poll($node, "SELECT retries > $retries FROM replicant.status WHERE pipeline = 'p'"),
	'piled up: the sink refuses');
$sink->control({ clear => 1 });
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']),
	'piled up: the sink equals the source');
@txlog = @{ $sink->txlog };
is_deeply([ map { $_->{nchanges} } @txlog[ $txns .. $#txlog ] ], [ 5000, 5000, 5000, 5000 ],
	'piled up: four transactions of 5,000 changes, each once');
cmp_ok(scalar(grep { $_->{transactions} > 1 } accepted_since($requests)), '>=', 1,
	'piled up: spilled transactions shared a request');
is(status("coalesce(last_error, '')"), '', 'no error left');
is(status('worker_pid'), $worker, 'the same worker did it all');

done_testing();
