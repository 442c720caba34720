# The server log says when a pipeline starts retrying against a failing sink
# and when it reaches the sink again, without any value from the rows;
# replicant.status says when it tries next (a refused connection at most 2 s
# apart), and retry_pipeline() has it try at once.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;
use Time::HiRes qw(time);

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

# status shows when the next attempt comes; while nothing accepts the
# connection the backoff stops growing at 2 s (not 30 s), so a sink that
# comes back is used within a few seconds.
ok(ReplicantTest::poll($node, "SELECT retries >= 10 FROM replicant.status", 120),
	'ten failed attempts');
my @waits;
foreach (1 .. 5)
{
	ok(ReplicantTest::poll($node,
			"SELECT state = 'retrying' AND next_retry_at IS NOT NULL FROM replicant.status"),
		'retry_next_retry_at: state retrying, next_retry_at set');
	push @waits, $node->safe_psql('postgres',
		"SELECT extract(epoch FROM next_retry_at - now()) FROM replicant.status WHERE next_retry_at IS NOT NULL");
}
ok(!grep({ $_ ne '' && $_ > 2.0 } @waits),
	"retry_refused_cap: refused connections are retried at most 2 s apart (@waits)");

my $back = time();
$sink->restart;
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'delivered once the sink is back');
note(sprintf('delivered %.1f s after the sink came back', time() - $back));
is($node->safe_psql('postgres', "SELECT next_retry_at IS NULL FROM replicant.status"), 't',
	'no next_retry_at once delivered');
ok(log_has(qr/LOG:  replicant pipeline "p" reached its sink again after \d+ failed attempts in \d+ s/),
	'the recovery is logged');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/row-value-never-logged.*sink|sink.*row-value-never-logged/,
	'no row value in those lines');

# An answer that asks for ten minutes (Retry-After: 600, the most replicant
# honours): retry_pipeline() has the pipeline try again now.
my ($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.retry_pipeline('p')");
like($err, qr/NOTICE:  pipeline "p" is not waiting to retry its sink/, 'retry_pipeline of a streaming pipeline says so');
$sink->control({ fail_status => 503, retry_after => 600 });
$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'second')");
ok(ReplicantTest::poll($node,
		"SELECT state = 'retrying' AND next_retry_at > now() + interval '9 minutes' FROM replicant.status"),
	'Retry-After: 600 shows as next_retry_at ten minutes ahead');
$sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.retry_pipeline('p')");
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'retry_pipeline: delivered at once, not ten minutes later');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']), 'the sink equals the source');

$node->stop;
$sink->stop;
done_testing();
