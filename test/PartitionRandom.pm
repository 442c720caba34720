# The randomized comparison with a PostgreSQL subscriber of tests 052 (row
# filter and column list) and 053 (neither): see test/t/052_partition_random.pl.
package PartitionRandom;

use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my ($node, $sub, $script);

sub query { return $node->safe_psql('postgres', @_); }

sub start_workload
{
	my ($transactions, $seed, %vars) = @_;
	my @cmd = ($node->config_data('--bindir') . '/pgbench', '-n', '-c', '2', '-j', '2', '-t', $transactions,
		"--random-seed=$seed", '-f', $script,
		map({ ('-D', "$_=$vars{$_}") } sort keys %vars),
		'-h', $node->host, '-p', $node->port, 'postgres');
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(\@cmd, '>', \$out, '2>', \$err);
	return sub {
		ok($h->finish, "workload of $transactions transactions per client completed")
		  or diag($err);
	};
}

sub caught_up
{
	ok(ReplicantTest::poll($node,
			"SELECT replicant.await_delivered('p_random', pg_current_wal_lsn(), 60000)", 180),
		'the sink has everything up to now');
	$node->wait_for_catchup('sub_r');
}

sub subscriber_rows
{
	return ReplicantTest::source_rows($sub, 'postgres', 'r');
}

# run(filtered => 1): the publication has a row filter and a column list.
sub run
{
	my (%opts) = @_;
	my $filter = $opts{filtered} ? 'v % 3 <> 0' : 'true';
	my $published = $opts{filtered} ? "(id, grp, v, note) WHERE ($filter)" : '';
	my $secret = $opts{filtered} ? '' : ', secret text';
	my $selected = $opts{filtered}
	  ? "SELECT id, grp, v, note FROM r WHERE $filter"
	  : 'SELECT id, grp, v, note, secret FROM r';

	my $seed = $ENV{REPLICANT_SEED} // int(rand(2**31));
	note("seed $seed");

	$node = ReplicantTest::new_node('publisher');
	$sub = ReplicantTest::new_node('subscriber');

	# The key (id, v) is the replica identity, so the filter on v and the
	# column list (without "secret") are valid for updates and deletes.
	$node->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE TABLE r (id int NOT NULL, gone int, grp int, v int NOT NULL, note text, secret text,
	                PRIMARY KEY (id, v)) PARTITION BY RANGE (id);
	ALTER TABLE r DROP COLUMN gone;
	CREATE TABLE r_1 PARTITION OF r FOR VALUES FROM (0) TO (1000);
	CREATE TABLE r_2 (secret text, note text, v int NOT NULL, grp int, id int NOT NULL);
	ALTER TABLE r ATTACH PARTITION r_2 FOR VALUES FROM (1000) TO (2000);
	CREATE TABLE r_3 (x int, id int NOT NULL, v int NOT NULL, grp int, secret text, note text);
	ALTER TABLE r_3 DROP COLUMN x;
	ALTER TABLE r ATTACH PARTITION r_3 FOR VALUES FROM (2000) TO (3000);
	INSERT INTO r (id, grp, v, note, secret)
	  SELECT g, g % 7, g % 10, 'initial ' || g, 'hidden' FROM generate_series(0, 2999, 5) g;
	CREATE PUBLICATION pub_r FOR TABLE r $published
	  WITH (publish_via_partition_root = true);
	CREATE SEQUENCE workload_progress;
	});

	$sub->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE TABLE r (id int NOT NULL, grp int, v int NOT NULL, note text$secret, PRIMARY KEY (id, v));
	});
	my $connstr = $node->connstr . ' dbname=postgres';
	$sub->safe_psql('postgres', "CREATE SUBSCRIPTION sub_r CONNECTION '$connstr' PUBLICATION pub_r");
	$sub->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')")
	  or die 'the subscription did not sync';

	# One row per id at most, and each client has ids of its own parity (moves
	# keep it), so that no statement fails and the clients never conflict.  An
	# id is drawn from [0, :span), shifted by :skip from 1000 on (skipping the
	# truncated partition); a move adds :hop modulo :wrap.
	$script = PostgreSQL::Test::Utils::tempdir() . '/workload.sql';
	PostgreSQL::Test::Utils::append_to_file($script, q{
\set k 2 * random(0, :span / 2 - 1) + :client_id % 2
\set id :k + :skip * (:k / 1000)
SELECT nextval('workload_progress');
\set v random(0, 29)
\set op random(1, 10)
\if :op <= 3
INSERT INTO r (id, grp, v, note, secret)
  SELECT :id, :v % 7, :v, 'inserted ' || :v, 'hidden' WHERE NOT EXISTS (SELECT FROM r WHERE id = :id);
\elif :op <= 5
UPDATE r SET v = (v + 1) % 30 WHERE id = :id;
\elif :op = 6
UPDATE r SET grp = grp + 1, note = 'updated ' || :v WHERE id = :id;
\elif :op = 7
UPDATE r SET secret = 'changed' WHERE id = :id;
\elif :op = 8
DELETE FROM r WHERE id = :id;
\else
UPDATE r SET id = (id + :hop) % :wrap
 WHERE id = :id AND NOT EXISTS (SELECT FROM r WHERE id = (:id + :hop) % :wrap);
\endif
});


	# Phase 1: every partition; moves between them.  The snapshot starts mid-way.
	my $finish = start_workload(600, $seed, span => 3000, skip => 0, hop => 1000, wrap => 3000);
	$node->poll_query_until('postgres', 'SELECT last_value > 200 FROM workload_progress')
	  or die 'the workload did not start';
	my $sink = ReplicantTest::start_sink(name => 'sink_random');
	query("SELECT replicant.create_pipeline('p_random', 'pub_r', '$sink->{url}', snapshot => 'initial')");
	$finish->();
	ReplicantTest::poll($node,
		"SELECT state IN ('streaming', 'halted') FROM replicant.status WHERE pipeline = 'p_random'", 180);
	unless (is(query("SELECT state FROM replicant.status WHERE pipeline = 'p_random'"), 'streaming',
			'the pipeline streams after its snapshot'))
	{
		diag(query("SELECT last_error FROM replicant.status WHERE pipeline = 'p_random'"));
			exit;
	}



	caught_up();
	my $expected = ReplicantTest::source_rows($node, 'postgres', "($selected)");
	is($sink->dump('public.r'), $expected, "without a truncate: the sink equals $selected");
	is(subscriber_rows(), $expected, 'without a truncate: so does the subscriber');

	# Phase 2: a partition is truncated, the workload goes on in r_1 and r_3.
	my $in_r2 = query("SELECT count(*) FROM r_2 WHERE $filter");
	query('TRUNCATE r_2');
	$finish = start_workload(400, $seed + 1, span => 2000, skip => 1000, hop => 2000, wrap => 4000);
	$finish->();
	caught_up();
	is($sink->dump('public.r'), subscriber_rows(),
		'after the truncate of one partition: the sink equals the subscriber');
	is(scalar(grep { /"id":1\d\d\d\b/ } split /\n/, $sink->dump('public.r')), $in_r2,
		"the truncated partition's rows stay, as at the subscriber");
	is(query("SELECT state FROM replicant.status WHERE pipeline = 'p_random'"), 'streaming',
		'nothing halted');

	query("SELECT replicant.drop_pipeline('p_random')");
	$sub->safe_psql('postgres', 'DROP SUBSCRIPTION sub_r');
}

1;
