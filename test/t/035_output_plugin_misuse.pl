# The replicant output plugin serves replicant's own pipeline workers only.
# A role with the REPLICATION attribute (no superuser, no replicant
# privilege) can name it anywhere a logical decoding plugin is named: it
# gets an error, with or without the option the workers used to pass
# ("replicant_worker"), and the server stays up.
#
#   pg_create_logical_replication_slot(..., 'replicant')
#   pg_logical_slot_peek_changes / get_changes on a disabled pipeline's slot
#   pg_recvlogical (a walsender) on that slot
#
# versions: all (slot handling: decoding contexts that SQL functions and walsenders create)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('plugin_misuse');
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub FOR TABLE t;
CREATE ROLE repl LOGIN REPLICATION;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'streamed')");
ok(ReplicantTest::poll($node,
		"SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 60000)"),
	'the pipeline streams');
my $slot = $node->safe_psql('postgres', "SELECT slot_name FROM replicant.pipelines WHERE name = 'p'");
# Disabled, its worker lets go of the slot; a change waits in it.
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('p')");
ok(ReplicantTest::poll($node,
		"SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$slot'"),
	'the disabled pipeline releases its slot');
$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'waiting in the slot')");

my $log_start = -s $node->logfile;

# Runs $sql as repl; returns psql's exit status and stderr.
sub as_repl
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE repl; $sql");
	return ($ret, $err);
}

sub server_up
{
	my ($label) = @_;
	is($node->safe_psql('postgres', 'SELECT 1'), '1', "$label: the server answers");
}

my $refused = qr/ERROR:  the replicant output plugin can only be used by replicant pipelines/;

my ($ret, $err) = as_repl("SELECT pg_create_logical_replication_slot('mine', 'replicant')");
isnt($ret, 0, 'creating a slot with the replicant plugin fails');
like($err, $refused, 'creating a slot: the plugin refuses');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'mine'"),
	'0', 'creating a slot: no slot is left behind');
server_up('creating a slot');

foreach my $call (
	"pg_logical_slot_peek_changes('$slot', NULL, NULL)",
	"pg_logical_slot_peek_changes('$slot', NULL, NULL, 'replicant_worker', '1')",
	"pg_logical_slot_get_changes('$slot', NULL, NULL, 'replicant_worker', '1')",
	"pg_logical_slot_peek_binary_changes('$slot', NULL, NULL, 'replicant_worker', '1')")
{
	($ret, $err) = as_repl("SELECT count(*) FROM $call");
	isnt($ret, 0, "$call fails");
	like($err, $refused, "$call: the plugin refuses");
	server_up($call);
}

# The same through the replication protocol (a walsender).
my ($out, $recv_err) = ('', '');
IPC::Run::run(
	[
		'pg_recvlogical', '-d', $node->connstr('postgres'), '-U', 'repl',
		'-S', $slot, '--start', '--no-loop', '-f', '-',
		'-o', 'replicant_worker=1', '-E', $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()')
	],
	'>', \$out, '2>', \$recv_err);
like($recv_err, qr/the replicant output plugin can only be used by replicant pipelines/,
	'pg_recvlogical: the plugin refuses');
server_up('pg_recvlogical');

my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_start);
unlike($log, qr/terminated by signal|server process .* was terminated/,
	'no server process was terminated by a signal');
unlike($log, qr/all server processes terminated; reinitializing/, 'the server did not restart');

# The pipeline's own worker still decodes the slot: nothing was consumed.
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('p')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']),
	'the pipeline delivers what waited in its slot');

$node->stop;
$sink->stop;
done_testing();
