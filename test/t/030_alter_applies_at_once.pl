# alter_pipeline's options apply to everything committed after it returns,
# and the worker it replaces leaves nothing to re-deliver.
use strict;
use warnings;
use JSON::PP;
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

# ---- alter_destination: the sink options of the pipeline's destination ------
# (its only one in this version) change as alter_pipeline changes them: what
# commits after the call goes to the new sink, nothing before it does.
my $other = ReplicantTest::start_sink(name => 'other');
$node->safe_psql('postgres', "SELECT replicant.alter_destination('p', 'default', sink_url => '$other->{url}')");
@out = split /\n/, $node->safe_psql('postgres', q{
	INSERT INTO t (v) VALUES ('to the other sink');
	SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000);
});
is($out[-1], 't', 'delivered after alter_destination');
like($other->dump('public.t'), qr/to the other sink/, 'to the sink alter_destination named');
unlike($other->dump('public.t'), qr/any prefix/, '... and nothing committed before the call');
unlike($sink->dump('public.t'), qr/to the other sink/, '... and not to the old sink');
$other->stop;
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('p', sink_url => '$sink->{url}')");

# ---- alter_pipeline while a batch is not acknowledged -----------------------
# Two ways the batch stays unacknowledged across the call: the sink applies
# every request but answers after the client gave up (delay_ms above
# http_timeout_ms: "late"), or it refuses every request with 503 ("down").
# Either way the worker sends the same batch again and again.  An
# alter_pipeline meanwhile removes a publication, turns messages off, or
# narrows message_prefixes; the next worker sends the batch again: decoded
# with the options its transactions committed under, so every transaction
# sent before the call is sent again after it with the same content (one
# content per commit_lsn; only a late sink keeps the first attempt's
# content to compare), and what commits after the call gets the new
# options.
sub alter_while_undelivered
{
	my ($name) = @_;
	my $down = $name eq 'down';
	my ($fault_on, $fault_off) =
	  $down
	  ? ({ fail_status => 503, fail_rate => 1.0 }, { fail_status => undef })
	  : ({ delay_ms => 1000 }, { delay_ms => 0 });
	my $late = ReplicantTest::start_sink(name => $name, keep_bodies => 1);
	$node->safe_psql('postgres', qq{
CREATE TABLE la_$name (id int PRIMARY KEY, v text);
CREATE TABLE lb_$name (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_la_$name FOR TABLE la_$name;
CREATE PUBLICATION pub_lb_$name FOR TABLE lb_$name;
});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$name', ARRAY['pub_la_$name', 'pub_lb_$name'], '$late->{url}',"
		  . " http_timeout_ms => 300, messages => true, message_prefixes => ARRAY['m1', 'm2'])");
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$name'"),
		"$name: streaming");

	# The transactions of every kept change body: [commit_lsn, canonical JSON].
	my $txns = sub {
		my ($from) = @_;
		my $bodies = $late->bodies;
		return map { my $t = $_; [ $t->{commit_lsn}, JSON::PP->new->canonical->encode($t) ] }
		  map { @{ $_->{body}{transactions} // [] } } @$bodies[ $from .. $#$bodies ];
	};
	my $kept_with = sub {
		my ($pattern, $from) = @_;
		return scalar(grep { $_->[1] =~ $pattern } $txns->($from));
	};

	# Each variant: commits $sql while the sink answers late, waits until the
	# sink kept its batch, calls alter_pipeline with $options, lets the sink
	# answer in time, waits for delivery; then the transactions sent before
	# the call must all come again after it.
	my $variant = sub {
		my ($label, $sql, $pattern, $options) = @_;
		# What committed before (the last variant's rows after its call) is
		# delivered first: else the fault catches that batch, and its retries,
		# never this variant's, are what the sink keeps.
		ok(ReplicantTest::poll($node,
				"SELECT replicant.await_delivered('$name', pg_current_wal_lsn(), 60000)", 90),
			"$name, $label: what came before is delivered");
		my $start = scalar(@{ $late->bodies });
		$late->control($fault_on);
		$node->safe_psql('postgres', $sql);
		if ($down)
		{
			ok(ReplicantTest::poll($node,
					"SELECT state = 'retrying' FROM replicant.status WHERE pipeline = '$name'"),
				"$name, $label: the sink refused the batch");
		}
		else
		{
			my $kept = 0;
			foreach (1 .. 600)
			{
				last if ($kept = $kept_with->($pattern, $start));
				select(undef, undef, undef, 0.1);
			}
			ok($kept, "$name, $label: the sink has the batch, unacknowledged");
		}
		my %before = map { $_->[0] => 1 } $txns->($start);
		$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('$name', $options)");
		my $after_call = scalar(@{ $late->bodies });
		$late->control($fault_off);
		ok(ReplicantTest::poll($node,
				"SELECT replicant.await_delivered('$name', pg_current_wal_lsn(), 60000)", 90),
			"$name, $label: delivered");
		my %again = map { $_->[0] => 1 } $txns->($after_call);
		is_deeply([ grep { !$again{$_} } sort keys %before ], [],
			"$name, $label: every transaction sent before the call was sent again after it");
	};

	$variant->('publication removed', qq{
BEGIN;
INSERT INTO la_$name VALUES (1, 'both');
INSERT INTO lb_$name VALUES (1, 'both');
SELECT pg_logical_emit_message(true, 'm1', 'removed 1');
COMMIT;
INSERT INTO lb_$name VALUES (2, 'lb alone');
}, qr/"both"/, "publication => ARRAY['pub_la_$name']");
	$node->safe_psql('postgres', "INSERT INTO lb_$name VALUES (3, 'after the call')");
	$node->safe_psql('postgres', "INSERT INTO la_$name VALUES (2, 'after the call')");

	$variant->('messages off', qq{
BEGIN;
INSERT INTO la_$name VALUES (3, 'with a message');
SELECT pg_logical_emit_message(true, 'm1', 'off 1');
COMMIT;
SELECT pg_logical_emit_message(false, 'm2', 'off, not transactional');
}, qr/"id":3/, 'messages => false');
	$node->safe_psql('postgres', qq{
BEGIN;
INSERT INTO la_$name VALUES (4, 'after the call');
SELECT pg_logical_emit_message(true, 'm1', 'off after');
COMMIT;
});

	$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('$name', messages => true)");
	$variant->('message_prefixes narrowed', qq{
BEGIN;
INSERT INTO la_$name VALUES (5, 'two messages');
SELECT pg_logical_emit_message(true, 'm1', 'narrowed m1');
SELECT pg_logical_emit_message(true, 'm2', 'narrowed m2');
COMMIT;
}, qr/"id":5/, "message_prefixes => ARRAY['m2']");
	$node->safe_psql('postgres', qq{
BEGIN;
INSERT INTO la_$name VALUES (6, 'after the call');
SELECT pg_logical_emit_message(true, 'm1', 'narrowed after m1');
SELECT pg_logical_emit_message(true, 'm2', 'narrowed after m2');
COMMIT;
});
	ok(ReplicantTest::poll($node,
			"SELECT replicant.await_delivered('$name', pg_current_wal_lsn(), 60000)", 90),
		"$name: everything delivered");

	# One content per commit_lsn, across every delivery and re-delivery.
	my %contents;
	$contents{ $_->[0] }{ $_->[1] } = 1 foreach $txns->(0);
	my @differ = grep { keys %{ $contents{$_} } > 1 } sort keys %contents;
	is_deeply(\@differ, [], "$name: no commit_lsn was sent with two contents")
	  or diag(join("\n", map { keys %{ $contents{$_} } } @differ));

	my $ids = sub {
		my ($t) = @_;
		return join(',', sort { $a <=> $b } map { /"id":(\d+)/ ? $1 : () } split /\n/, $late->dump($t));
	};
	is($ids->("public.lb_$name"), '1,2', "$name: the removed publication\'s rows up to the call arrive, not later ones");
	is($ids->("public.la_$name"), '1,2,3,4,5,6', "$name: the other publication\'s rows all arrive");
	my %messages = map { decode_base64($_->{content}) => 1 } @{ $late->messages };
	is_deeply([ sort keys %messages ],
		[ 'narrowed after m2', 'narrowed m1', 'narrowed m2', 'off 1', 'off, not transactional', 'removed 1' ],
		"$name: every message committed before a call under the options before it, none the calls left out after");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('$name')");
	$late->stop;
}

alter_while_undelivered($_) foreach ('late', 'down');

$node->stop;
$sink->stop;
done_testing();
