# alter_pipeline(publication => ...) adding a publication:
#
#   while the pipeline is behind, positions decoded from before the new
#     publication existed deliver the other publications' changes (the new
#     one is empty there), and nothing halts
#   a batch re-delivered across the alter (a crash after the sink's 2xx and
#     before the checkpoint) carries what it carried before: no transaction
#     of the added table arrives below the sink's watermark
#
# versions: all (publication semantics)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('pubadded');
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE a (id int PRIMARY KEY, v text);
CREATE TABLE b (id int PRIMARY KEY, v text);
CREATE TABLE c (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub_a FOR TABLE a;
});

sub poll { return ReplicantTest::poll($node, @_); }
sub ids { my ($sink, $t) = @_; return join(',', map { /"id":(\d+)/ ? $1 : () } split /\n/, $sink->dump($t)); }

# ---- a publication created after the position being decoded ---------------------
{
	my $sink = ReplicantTest::start_sink(name => 'sink_behind');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('behind', 'pub_a', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'behind'"),
		'behind: streaming');
	$sink->stop;
	$node->safe_psql('postgres', "INSERT INTO a VALUES (1, 'before')");
	ok(poll("SELECT state = 'retrying' FROM replicant.status WHERE pipeline = 'behind'"),
		'behind: the pipeline is behind');
	$node->safe_psql('postgres', 'CREATE PUBLICATION pub_c FOR TABLE c');
	$node->safe_psql('postgres', "INSERT INTO c VALUES (1, 'before alter')");
	$node->safe_psql('postgres', "INSERT INTO a VALUES (2, 'between')");
	$node->safe_psql('postgres',
		"SELECT replicant.alter_pipeline('behind', publication => ARRAY['pub_a', 'pub_c'])");
	$node->safe_psql('postgres', "INSERT INTO c VALUES (2, 'after alter')");
	$node->safe_psql('postgres', "INSERT INTO a VALUES (3, 'after')");
	$sink->restart;
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['a'], 60),
		"behind: the other publication's changes all arrived");
	is($node->safe_psql('postgres',
			"SELECT state || ' ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'behind'"),
		'streaming ', 'behind: streaming, not halted');
	$node->safe_psql('postgres', "INSERT INTO c VALUES (3, 'later')");
	ok(ReplicantTest::poll($node,
			"SELECT replicant.await_delivered('behind', pg_current_wal_lsn(), 60000)"),
		'behind: delivered up to now');
	is(ids($sink, 'public.c'), '2,3', 'behind: the added table from the alter on');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('behind')");
	$sink->stop;
}

# ---- a re-delivery across the alter keeps its content -----------------------------
{
	$node->safe_psql('postgres', 'CREATE PUBLICATION pub_b FOR TABLE b');
	my $sink = ReplicantTest::start_sink(name => 'sink_order', keep_bodies => 1);
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('ordered', 'pub_a', '$sink->{url}')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'ordered'"),
		'ordered: streaming');
	$node->safe_psql('postgres', "ALTER SYSTEM SET replicant.fault_point = 'after_ack'");
	$node->reload;
	# a's first row is in every batch from here on (never checkpointed), so
	# no burst that only skipped b's row lets the slot move past it.
	$node->safe_psql('postgres', "INSERT INTO a VALUES (9, 'published')");
	$node->safe_psql('postgres', "INSERT INTO b VALUES (10, 'not yet published')");
	$node->safe_psql('postgres', "INSERT INTO a VALUES (10, 'published')");
	# The sink applied a batch up to a's second row; the worker "crashed"
	# before its checkpoint, each time.
	my $ok = 0;
	for (1 .. 600)
	{
		if (ids($sink, 'public.a') =~ /\b10\b/) { $ok = 1; last; }
		select(undef, undef, undef, 0.1);
	}
	ok($ok, 'ordered: the sink took the batch before the crash');
	$node->safe_psql('postgres',
		"SELECT replicant.alter_pipeline('ordered', publication => ARRAY['pub_a', 'pub_b'])");
	$node->safe_psql('postgres', "ALTER SYSTEM RESET replicant.fault_point");
	$node->reload;
	$node->safe_psql('postgres', "INSERT INTO b VALUES (11, 'published now')");
	ok(ReplicantTest::poll($node,
			"SELECT replicant.await_delivered('ordered', pg_current_wal_lsn(), 60000)", 90),
		'ordered: delivered up to now');

	# No transaction may arrive below the watermark unless it was applied before.
	my (%applied, $watermark, @late);
	$watermark = -1;
	foreach my $req (@{ $sink->bodies })
	{
		my $body = $req->{body};
		next unless ($body->{kind} // '') eq 'changes';
		foreach my $txn (@{ $body->{transactions} })
		{
			my $lsn = $txn->{commit_lsn};
			if ($lsn <= $watermark) { push @late, $lsn unless $applied{$lsn}; next; }
			$applied{$lsn} = 1;
			$watermark = $lsn;
		}
	}
	is_deeply(\@late, [], 'ordered: nothing new arrived below the watermark');
	is(ids($sink, 'public.b'), '11', 'ordered: the added table from the alter on');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('ordered')");
	$sink->stop;
}

$node->stop;
done_testing();
