# Races of add_destination (review rv-dest7sql).
#
# 1. A sync that another session asks for while add_destination's
#    transaction is still open must not make the stopped pipeline runnable:
#    a worker started then reads the destinations as they were, delivers a
#    commit made after the call to the old destination only and moves the
#    slot past the new destination's checkpoint (the slot stays held until
#    the transaction ends, api_xact.c).
# 2. The checks made under the pipeline row's lock see what a concurrent
#    call committed meanwhile: the limit of 16 destinations and a NATS
#    destination alone hold with two calls at once.
# 3. A transaction that changed a pipeline cannot be prepared: what its end
#    must release (the held slot) belongs to this backend, not to a
#    prepared transaction that commits later.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('destination_races',
	conf => "replicant.checkpoint_interval = 0\nmax_prepared_transactions = 2");
my $sink_a = ReplicantTest::start_sink(name => 'sink_a');
my $sink_b = ReplicantTest::start_sink(name => 'sink_b');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $sink_a->{url} . "')");

sub ids_in
{
	my ($sink) = @_;
	my @ids = map { /"id":\s*(\d+)/ ? $1 : () } split /\n/, $sink->dump('public.t');
	return join(',', sort { $a <=> $b } @ids);
}

sub wait_ids
{
	my ($sink, $want, $tries) = @_;
	for (1 .. $tries)
	{
		return 1 if ids_in($sink) eq $want;
		usleep(250_000);
	}
	diag('ids: ' . ids_in($sink));
	return 0;
}

$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'one')");
ok(wait_ids($sink_a, '1', 240), 'a streams');

my $adder = $node->background_psql('postgres');
$adder->query_safe('BEGIN');
$adder->query_safe("SELECT replicant.add_destination('p', 'b', '" . $sink_b->{url} . "')");

# Committed after the call: b's by the contract.
$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'two')");
# Any management call of another session (here the sync alone) syncs the database.
$node->safe_psql('postgres', "SELECT replicant._request_sync()");
# a worker started by the sync would deliver 2 within this window
my $raced = wait_ids($sink_a, '1,2', 20);
ok(!$raced, 'no worker runs while add_destination\'s transaction is open');
$adder->query_safe('COMMIT');
$adder->quit;

$node->safe_psql('postgres', "INSERT INTO t VALUES (3, 'three')");
ok(wait_ids($sink_a, '1,2,3', 240), 'a has everything');
my $b_ok = wait_ids($sink_b, '2,3', 120);
ok($b_ok, 'b got every commit after add_destination (2 and 3)');

# 2. Two calls at once.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('r', 'pub', 'http://127.0.0.1:9/a', enabled => false)");
for my $i (2 .. 15)
{
	$node->safe_psql('postgres',
		"SELECT replicant.add_destination('r', 'd$i', 'http://127.0.0.1:9/d$i')");
}
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'r'"), '15', '15 destinations');

my $x = $node->background_psql('postgres');
$x->query_safe('BEGIN');
$x->query_safe("SELECT replicant.add_destination('r', 'x', 'http://127.0.0.1:9/x')");

my ($out, $err) = ('', '');
local %ENV = $node->_get_env();
my $y = IPC::Run::start(
	[ $node->installed_command('psql'), '-XAtq', '-d', $node->connstr('postgres'),
	  '-c', "SELECT replicant.add_destination('r', 'y', 'http://127.0.0.1:9/y')" ],
	'>', \$out, '2>', \$err);
my $waiting = 0;
for (1 .. 200)
{
	$waiting = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%add_destination%'");
	last if $waiting;
	usleep(100_000);
}
ok($waiting, 'the second add_destination waits for the first one\'s lock');
$x->query_safe('COMMIT');
$x->quit;
$y->finish;
like($err, qr/cannot have more than 16 destinations/, 'the second add_destination is refused');
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'r'"), '16',
	'at most 16 destinations');

# The same with NATS: alter_destination moves the only other one to a NATS
# stream while add_destination, for the same stream, waits.
$node->safe_psql('postgres', q{
	SELECT replicant.create_pipeline('q', 'pub', 'http://127.0.0.1:9/qa', enabled => false);
});
$x = $node->background_psql('postgres');
$x->query_safe('BEGIN');
$x->query_safe("SELECT replicant.alter_destination('q', 'default', sink_url => 'nats://127.0.0.1:9/S')");
($out, $err) = ('', '');
$y = IPC::Run::start(
	[ $node->installed_command('psql'), '-XAtq', '-d', $node->connstr('postgres'),
	  '-c', "SELECT replicant.add_destination('q', 'y', 'nats://127.0.0.1:9/S')" ],
	'>', \$out, '2>', \$err);
$waiting = 0;
for (1 .. 200)
{
	$waiting = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%add_destination%'");
	last if $waiting;
	usleep(100_000);
}
ok($waiting, 'add_destination waits for alter_destination\'s lock');
$x->query_safe('COMMIT');
$x->quit;
$y->finish;
like($err, qr/pipeline "q" has another destination on this NATS stream/,
	'add_destination on the stream of the altered one is refused');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'q'"),
	'1', 'the NATS destination of q stays alone');

# 3. PREPARE TRANSACTION after a change of a pipeline is refused.
my ($ret, $stdout, $stderr) = $node->psql('postgres', qq{
	BEGIN;
	SELECT replicant.add_destination('p', 'z', '$sink_b->{url}');
	PREPARE TRANSACTION 'add_z';
});
like($stderr, qr/cannot PREPARE a transaction that created, changed or dropped a replicant pipeline/,
	'PREPARE TRANSACTION after add_destination is refused');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'nothing prepared');
$node->safe_psql('postgres', "INSERT INTO t VALUES (4, 'four')");
ok(wait_ids($sink_a, '1,2,3,4', 240), 'the pipeline streams on after the refused PREPARE');

done_testing();
