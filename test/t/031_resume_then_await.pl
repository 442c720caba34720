# After resume_pipeline returns, no reader sees the pipeline halted any more:
# await_delivered waits for delivery instead of failing, and the status view
# shows neither the halted state nor the old reason.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('resume');
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");

foreach my $round (1 .. 3)
{
	$sink->control({ fail_status => 400 });
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($round)");
	ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'"),
		"round $round: a 400 halts the pipeline");
	$sink->control({ clear => JSON::PP::true });

	# One session, statement after statement, as an operator would type them.
	my ($ret, $out, $err) = $node->psql('postgres', q{
		SELECT replicant.resume_pipeline('p');
		SELECT state, coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'p';
		SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000);
	});
	is($ret, 0, "round $round: await_delivered right after resume_pipeline does not fail")
	  or diag($err);
	my @lines = split /\n/, $out;
	unlike($lines[-2] // '', qr/halted|sink rejected/,
		"round $round: the status shows no halt right after resume_pipeline");
	is($lines[-1], 't', "round $round: the change is delivered");
}

like($node->safe_psql('postgres', "SELECT sink_latency_ms FROM replicant.status WHERE pipeline = 'p'"),
	qr/^\d+(\.\d{1,3})?$/, 'sink_latency_ms is rounded to three decimals');

$node->stop;
$sink->stop;
done_testing();
