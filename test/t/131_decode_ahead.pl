# Decoding goes on while a request is out: the worker renders the next batch
# while the sink reads and answers the one before (src/fanout.c,
# decodes_ahead), one batch ahead at most, and still sends a destination one
# request at a time, in commit order, moving its checkpoint only with an
# answer.  The sink applies each request at once but holds its answer
# (hold_answers) for as long as a case needs:
#
#   - the worker decodes the next transaction while the sink holds the
#     answer to the one before (the "decode" fault point is reached then);
#   - a 400 to the request after the held one halts the pipeline: the batch
#     decoded behind it never leaves, and after resume_pipeline() every
#     transaction arrives once, in commit order;
#   - a stop on request (alter_pipeline) with a request out and the next
#     batch decoded waits for the answer: the next worker sends nothing
#     twice;
#   - a worker terminated with a request out and the next batch decoded
#     sends at most the request out again (the sink skips it by commit LSN).
#
# versions: 15 18
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('decode_ahead');
my $sink = ReplicantTest::start_sink();

# One transaction per batch: the batch after the one out is the next commit.
# Answers are held for a while: no timeout re-sends a request meanwhile.
$node->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
	SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}', batch_max_transactions => 1,
	                                 http_timeout_ms => 600000);
});
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"), 'the pipeline streams');

sub poll { return ReplicantTest::poll($node, $_[0], $_[1] // 120); }

sub fault_point { return ReplicantTest::set_fault_point($node, $_[0]); }

sub insert { $node->safe_psql('postgres', "INSERT INTO t VALUES ($_[0], 'v$_[0]')"); return; }

# How many times the sink applied each of the given ids (0: never).
sub applied
{
	my $counts = $sink->deliveries('public.t');
	my %by_id = map { (/"id":\s*(\d+)/ ? $1 : $_) => $counts->{$_} } keys %$counts;
	return join(',', map { $by_id{$_} // 0 } @_);
}

sub worker_pid
{
	return $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
}

# ---- decoding goes on while the sink holds an answer -----------------------
# The fault point is read by a worker that starts after it is set (no reload
# race); holding at "deliver" (a request begins) it reads the next setting
# itself, so "decode:hold" is in force before the second commit.
fault_point('deliver:hold');
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
ok(poll("SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"),
	'the worker stopped');
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"), 'a new worker streams');
$sink->control({ hold_answers => 1 });

my $offset = -s $node->logfile;
insert(1);
$node->wait_for_log(qr/fault point "deliver" reached, holding/, $offset);
fault_point('decode:hold');
$node->wait_for_log(qr/fault point "deliver" released/, $offset);
ok(poll_sink(sub { applied(1) eq '1' }), 'the sink applied the first transaction and holds its answer');

$offset = -s $node->logfile;
insert(2);
ok(defined eval { $node->wait_for_log(qr/fault point "decode" reached, holding/, $offset) },
	'the worker decoded the second transaction while the answer to the first was held');
is($sink->stats->{requests}, 1, '... and sent nothing more meanwhile');

# ---- a 400 to the request after the held one halts; nothing decoded behind it leaves
fault_point(undef);
$node->wait_for_log(qr/fault point "decode" released/, $offset);
insert(3);
$sink->control({ hold_answers => 0, fail_status => 400, fail_first => 1 });
ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'"), 'the 400 halted the pipeline');
like($node->safe_psql('postgres', "SELECT coalesce(p.halt_reason, d.halt_reason) FROM replicant.pipelines p"
	  . " JOIN replicant.destinations d ON d.pipeline_id = p.id WHERE p.name = 'p'"),
	qr/HTTP 400/, 'the halt names the 400');
is(applied(1, 2, 3), '1,0,0', 'the sink has the first transaction only: the third, decoded behind the refused one, never left');
is($sink->stats->{requests}, 2, '... in two requests, the held one and the refused one');

$sink->control({ clear => 1 });
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('p')");
ok($sink->has_ids('public.t', 1, 3), 'after resume_pipeline every transaction arrived');
is(applied(1, 2, 3), '1,1,1', '... each once');
is($sink->stats->{duplicate_transactions}, 0, '... none sent twice');
my @lasts = map { $_->{last_lsn} } grep { $_->{kind} eq 'changes' } @{ $sink->stats->{accepted} };
is_deeply(\@lasts, [ sort { $a <=> $b } @lasts ], '... in requests in commit order');

# ---- a stop on request waits for the answer out ----------------------------
# alter_pipeline() stops the worker and waits for it to exit.
$sink->control({ hold_answers => 1 });
insert(4);
ok(poll_sink(sub { applied(4) eq '1' }), 'the sink applied the fourth transaction and holds its answer');
insert(5);
my $alter = $node->background_psql('postgres');
$alter->query_until(qr/altering/,
	"\\echo altering\nSELECT replicant.alter_pipeline('p', http_timeout_ms => 600001);\n");
ok(poll("SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%alter_pipeline%'"
	  . " AND state = 'active' AND wait_event IS NOT NULL AND pid <> pg_backend_pid()"),
	'alter_pipeline waits for the worker, which waits for the answer out');
$sink->control({ hold_answers => 0 });
$alter->quit;
ok($sink->has_ids('public.t', 1, 5), 'after the stop and a new worker the fifth transaction arrived');
is(applied(4, 5), '1,1', 'each arrived once');
is($sink->stats->{duplicate_transactions}, 0, 'the stop waited for the answer out: nothing was sent twice');

# ---- a worker terminated with a request out --------------------------------
$sink->control({ hold_answers => 1 });
insert(6);
ok(poll_sink(sub { applied(6) eq '1' }), 'the sink applied the sixth transaction and holds its answer');
insert(7);
my $pid = worker_pid();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$sink->control({ hold_answers => 0 });
ok(poll("SELECT worker_pid IS NOT NULL AND worker_pid <> $pid FROM replicant.status WHERE pipeline = 'p'"),
	'a new worker runs');
ok($sink->has_ids('public.t', 1, 7), 'every transaction arrived after the termination');
is(applied(6, 7), '1,1', 'each took effect once');
my $again = $sink->stats->{duplicate_transactions};
ok($again <= 1, "at most the request out was sent again ($again transactions)");

done_testing();

# Polls a condition on the sink's database, up to 120 s.
sub poll_sink
{
	my ($cond) = @_;
	for (1 .. 600)
	{
		return 1 if $cond->();
		usleep(200_000);
	}
	return 0;
}

sub usleep { Time::HiRes::usleep(@_); return; }
