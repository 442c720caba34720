# The server log says when a pipeline starts retrying against a failing sink
# and when it reaches the sink again, without any value from the rows.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('retrylog');
my $sink = ReplicantTest::start_sink();
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status"), 'streaming');

sub log_has
{
	my ($re) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if PostgreSQL::Test::Utils::slurp_file($node->logfile) =~ $re;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# The sink goes away: connections are refused.
$sink->stop;
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'row-value-never-logged')");
ok(log_has(qr/LOG:  replicant pipeline "p" could not deliver to its sink, retrying: .*connect/),
	'the first failed attempt is logged, with its class');
ok(ReplicantTest::poll($node, "SELECT retries >= 3 FROM replicant.status"), 'it keeps retrying');
my $lines = () = PostgreSQL::Test::Utils::slurp_file($node->logfile) =~ /could not deliver to its sink/g;
is($lines, 1, 'the following attempts are not logged one by one');

$sink->restart;
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'delivered once the sink is back');
ok(log_has(qr/LOG:  replicant pipeline "p" reached its sink again after \d+ failed attempts in \d+ s/),
	'the recovery is logged');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/row-value-never-logged.*sink|sink.*row-value-never-logged/,
	'no row value in those lines');

$node->stop;
$sink->stop;
done_testing();
