# alter_pipeline's options apply to everything committed after it returns,
# and the worker it replaces leaves nothing to re-deliver.
use strict;
use warnings;
use MIME::Base64;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('alter');
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
ok(ReplicantTest::poll($node,
	"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'pipeline streams');

# Each round changes the prefix the pipeline delivers, then commits a
# message with it and waits for it: the first rounds on an idle pipeline,
# the others under a steady write load, with requests that stay in flight a
# while so that a stop often meets one.
my $script = PostgreSQL::Test::Utils::tempdir() . '/insert.sql';
PostgreSQL::Test::Utils::append_to_file($script, "INSERT INTO t (v) VALUES ('load');\n");
my $load;
my @missing;
foreach my $round (1 .. 8)
{
	if ($round == 4)
	{
		$sink->control({ delay_ms => 30 });
		$load = IPC::Run::start(
			[ 'pgbench', '-n', '-T', '60', '-R', '200', '-c', '2', '-f', $script,
			  '-h', $node->host, '-p', $node->port, 'postgres' ],
			'>', '/dev/null', '2>', '/dev/null');
	}
	my $options = $round == 1
	  ? "messages => true, message_prefixes => ARRAY['m$round']"
	  : "message_prefixes => ARRAY['m$round']";
	$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', $options)");
	my @out = split /\n/, $node->safe_psql('postgres', qq{
		BEGIN;
		INSERT INTO t (v) VALUES ('round $round');
		SELECT pg_logical_emit_message(true, 'm$round', 'round $round');
		COMMIT;
		SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000);
	});
	is($out[-1], 't', "round $round: await_delivered returns true");
	push @missing, $round
	  unless grep { $_->{prefix} eq "m$round" && decode_base64($_->{content}) eq "round $round" }
	  @{ $sink->messages };
}
is_deeply(\@missing, [],
	'every message committed after alter_pipeline returned was delivered with the new options');

# The load has done its part once the rounds are over: stop it (a
# transaction cut off rolls back whole) and wait until its backends are gone.
$load->kill_kill(grace => 5);
$node->poll_query_until('postgres', q{SELECT NOT EXISTS (
	SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgbench')});
$sink->control({ delay_ms => 0 });
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000)"),
	't', 'the load is delivered');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']), 'the sink holds every row');
is($sink->stats->{duplicate_transactions}, 0,
	'no transaction was delivered twice across the worker restarts');

# A transaction's messages ride it exactly once: no commit_lsn seen twice.
my %seen;
my @twice = grep { $seen{$_->{commit_lsn}}++ } grep { $_->{transactional} } @{ $sink->messages };
is(scalar(@twice), 0, 'no transaction re-sent with messages it did not carry before');

# message_prefixes => '{}' goes back to every prefix (NULL leaves it as it is).
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', message_prefixes => '{}')");
is($node->safe_psql('postgres', "SELECT message_prefixes IS NULL FROM replicant.pipelines WHERE name = 'p'"),
	't', "message_prefixes => '{}' clears the prefix filter");
my @out = split /\n/, $node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO t (v) VALUES ('any prefix');
	SELECT pg_logical_emit_message(true, 'any.prefix', 'any prefix');
	COMMIT;
	SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000);
});
is($out[-1], 't', 'delivered after clearing the prefix filter');
ok((grep { $_->{prefix} eq 'any.prefix' } @{ $sink->messages }),
	'a message of any prefix is delivered again');
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', sink_url => '$sink->{url}')");
is($node->safe_psql('postgres', "SELECT message_prefixes IS NULL FROM replicant.pipelines WHERE name = 'p'"),
	't', 'and NULL leaves it so');

like(PostgreSQL::Test::Utils::slurp_file($node->logfile),
	qr/replicant pipeline "p" stopped on request/, 'the old worker stopped cleanly');

$node->stop;
$sink->stop;
done_testing();
