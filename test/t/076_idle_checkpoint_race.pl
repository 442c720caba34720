# An idle pipeline confirms its slot past its own trailing records in memory
# only (slot_position.c, confirm_own).  A server checkpoint that found the
# slot dirty while the worker saved it must not copy the slot after the
# worker moved it past the record: the slot's file would hold a
# confirmed_flush beyond every slot_positions record, and after a crash the
# worker would take that for a slot moved by something else and halt.
#
# gdb holds the worker inside its own save of the slot (pg_fsync) while a
# CHECKPOINT starts, so the interleaving is forced rather than waited for.
# (Found by an outside review of the idle drain.)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;
use IPC::Run;

# .ci/run installs gdb: a missing one fails the run rather than skip this.
die 'gdb is needed (apt-get install gdb)' unless -x '/usr/bin/gdb';

my $node = ReplicantTest::new_node('ckptrace',
	conf => "autovacuum = off\ncheckpoint_timeout = '1h'");
my $sink = ReplicantTest::start_sink();
$node->safe_psql('postgres', qq{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
	SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}');
});
my $slot = ReplicantTest::slot_name($node, 'postgres', 'p');
my $drained = "SELECT confirmed_flush_lsn >= pg_catalog.pg_current_wal_lsn()"
  . " FROM pg_replication_slots WHERE slot_name = '$slot'";
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status"), 'streaming');
ok(ReplicantTest::poll($node, $drained, 120), 'drained');

my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM replicant.status WHERE pipeline = 'p'");
my $psql = join(' ', map { "'$_'" } ('psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres', '-c', 'CHECKPOINT'));
my $gdbout = "$PostgreSQL::Test::Utils::tmp_check/gdb.out";
my $script = "$PostgreSQL::Test::Utils::tmp_check/gdb.cmd";
open(my $fh, '>', $script) or die;
print $fh <<"GDB";
set pagination off
set confirm off
break ReplicationSlotSave if \$_caller_is("replicant_slot_position_confirm_own")
echo READY\\n
continue
echo IN-CONFIRM-OWN-SAVE\\n
tbreak pg_fsync
continue
echo IN-SAVESLOTTOPATH\\n
bt 4
shell ($psql > $PostgreSQL::Test::Utils::tmp_check/ckpt.out 2>&1 &)
shell sleep 2
delete
detach
quit
GDB
close($fh);
my $gdb = IPC::Run::start([ 'gdb', '-batch', '-x', $script, '-p', $pid ], '<', '/dev/null', '>', $gdbout, '2>&1');
my $deadline = time() + 60;
sleep 1 until (-s $gdbout && slurp_file($gdbout) =~ /READY/) || time() > $deadline;
like(slurp_file($gdbout), qr/READY/, 'gdb attached, breakpoint set');

$node->safe_psql('postgres', join('', map { "INSERT INTO t (v) VALUES ('burst $_');\n" } 1 .. 50));
$gdb->finish;
my $out = slurp_file($gdbout);
note($out);
like($out, qr/IN-SAVESLOTTOPATH/, 'the worker was held inside its own save of the slot');
$deadline = time() + 60;
sleep 1 until (-s "$PostgreSQL::Test::Utils::tmp_check/ckpt.out") || time() > $deadline;
like(slurp_file("$PostgreSQL::Test::Utils::tmp_check/ckpt.out"), qr/CHECKPOINT/, 'the checkpoint ended');
ok(ReplicantTest::poll($node, $drained, 120), 'drained again (in memory)');
note($node->safe_psql('postgres', "SELECT s.confirmed_flush_lsn, p.confirmed_lsn, pg_current_wal_lsn() FROM pg_replication_slots s, replicant.slot_positions p WHERE s.slot_name = '$slot'"));

# A crash: shared memory is rebuilt from the slot's file.
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres', "INSERT INTO t (v) VALUES ('after crash')");
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' OR (state = 'streaming' AND confirmed_flush_lsn >= pg_catalog.pg_current_wal_lsn())"
		  . " FROM replicant.status WHERE pipeline = 'p'", 120),
	'the worker halted or delivered what was written after the crash');
is($node->safe_psql('postgres',
	"SELECT state || '|' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'p'"),
	'streaming|', 'after a crash the pipeline streams: no "moved by something else" halt');
done_testing();
