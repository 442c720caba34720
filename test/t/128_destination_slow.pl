# A slow destination does not pace the others (issue #34 item 3,
# docs/destinations-design.md §3.3): while one destination's request is
# out (its sink hangs, or answers late), the others are sent every batch,
# decoding goes on, and the worker waits for that answer between its
# cycles.  A stop on request waits for the answer, so nothing acknowledged
# is sent twice; a killed worker loses nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('dest_slow',
	conf => "restart_after_crash = on\nreplicant.checkpoint_interval = 0");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink_a->{url}', batch_max_transactions => 10)");
# b waits for its sink as long as it takes: ten minutes.
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'b', '$sink_b->{url}', batch_max_transactions => 10,"
	  . " http_timeout_ms => 600000)");

my $n = 0;
sub insert
{
	my ($count) = @_;
	my $sql = '';
	for (1 .. $count)
	{
		$n++;
		$sql .= "INSERT INTO t VALUES ($n, 'v$n');\n";
	}
	$node->safe_psql('postgres', $sql);
}

sub ids_in { return $_[0]->ids('public.t'); }
sub has_all { return $_[0]->has_ids('public.t', 1, $n); }

# Transactions the sink was sent again (its watermark skipped them).
sub duplicates { return $_[0]->stats->{duplicate_transactions}; }

insert(5);
ok(has_all($sink_a) && has_all($sink_b), 'both destinations stream');

# ---- 1. b's sink hangs: a gets every transaction meanwhile ----------------
$sink_b->control({ hang => 1 });
insert(40);
ok(has_all($sink_a), "a gets every transaction while b's request hangs");
is(ids_in($sink_b), '1,2,3,4,5', "b's sink took nothing since");
is($node->safe_psql('postgres',
		"SELECT state FROM replicant.destination_status WHERE pipeline = 'p' AND destination = 'default'"),
	'streaming', 'a is streaming');

# Its sink back (a restart drops the hung connection: b's attempt fails
# and is retried), b gets everything; neither gets anything twice.
$sink_b->control({ clear => 1 });
$sink_b->restart;
ok(has_all($sink_b), 'b catches up once its sink answers');
insert(3);
ok(has_all($sink_a) && has_all($sink_b), 'both stream on');
is(duplicates($sink_a) . '/' . duplicates($sink_b), '0/0', 'neither was sent anything twice');

# ---- 2. a stop on request while b's answer is late -------------------------
# The sink applies b's batch, then answers 5 s later; alter_destination
# stops the worker meanwhile, which waits for that answer and
# checkpoints it: the next worker sends it no second time.
my $b_dups = duplicates($sink_b);
$sink_b->control({ delay_ms => 5000 });
insert(2);
ok(has_all($sink_b), "b's sink applied the batch (its answer comes later)");
$node->safe_psql('postgres', "SELECT replicant.alter_destination('p', 'default', batch_max_transactions => 11)");
$sink_b->control({ clear => 1 });
insert(2);
ok(has_all($sink_a) && has_all($sink_b), 'after the stop, both get what follows');
is(duplicates($sink_b), $b_dups, 'b was sent nothing twice across the stop');

# ---- 3. a killed worker while b's request hangs: nothing lost --------------
$sink_b->control({ hang => 1 });
insert(20);
ok(has_all($sink_a), 'a streams while b hangs again');
my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
ReplicantTest::kill_worker($node, $pid);
insert(5);
ok(has_all($sink_a), 'a gets everything after the crash');
$sink_b->control({ clear => 1 });
$sink_b->restart;
ok(has_all($sink_b), 'b gets everything once its sink answers');

done_testing();
