# Two destinations of one pipeline reaching one receiver (issue #34,
# docs/destinations-design.md §2.4): each gets every transaction, so a
# receiver must tell them apart.  Bodies of a destination other than
# "default" say "destination" after "pipeline" (changes, messages, the
# reads of its own backfill); the reference sink keeps a watermark per
# (pipeline, destination), so neither destination's transactions are taken
# for the other's re-deliveries.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;

my $node = ReplicantTest::new_node('one_receiver', conf => "replicant.checkpoint_interval = 0");
my $sink = ReplicantTest::start_sink(name => 'sink', keep_bodies => 1);

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
	INSERT INTO t SELECT g, 'before' FROM generate_series(1, 5) g;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}', messages => true)");
$node->safe_psql('postgres', "INSERT INTO t VALUES (6, 'one')");
ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 60),
	'default streams');
# b: the same receiver, with a backfill of t of its own.
$node->safe_psql('postgres',
	"SELECT replicant.add_destination('p', 'b', '$sink->{url}', snapshot => 'incremental')");
my $sql = '';
$sql .= "INSERT INTO t VALUES ($_, 'v$_');\n" for 7 .. 26;
$sql .= "SELECT pg_logical_emit_message(false, 'note', 'hello');\n";
$sql .= "UPDATE t SET v = 'last' WHERE id = 1;\n";
$node->safe_psql('postgres', $sql);
ok(ReplicantTest::poll($node,
		"SELECT state = 'done' FROM replicant.backfill_status WHERE pipeline = 'p' AND destination = 'b'", 90),
	"b's backfill is done");
ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 90),
	'both destinations have everything');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['t']), 'the receiver equals the source');

my $stats = $sink->stats;
is($stats->{duplicate_transactions}, 0, "neither destination's transactions were taken for re-deliveries");
is(join(',', sort keys %{ $stats->{watermarks} }), 'p,p.b', 'one watermark per destination');
is($stats->{watermarks}{p}, $stats->{watermarks}{'p.b'}, 'both at the last commit');

# Each body says whose it is.
my (%kinds, @wrong);
foreach my $b (@{ $sink->bodies })
{
	my ($id, $body) = ($b->{webhook_id}, $b->{body});
	my $whose = $id =~ /^p\.b-/ ? 'b' : $id =~ /^p-/ ? 'default' : 'other';
	$kinds{"$whose $body->{kind}"}++;
	push @wrong, $id
	  if ($whose eq 'b' && ($body->{destination} // '') ne 'b')
	  || ($whose eq 'default' && exists $body->{destination})
	  || $whose eq 'other';
}
is_deeply(\@wrong, [], 'bodies of b name it, bodies of default name none');
ok($kinds{'b changes'} && $kinds{'default changes'}, 'both sent change batches');
ok($kinds{'b snapshot'}, "b's backfill reads name it");
ok($kinds{'b message'} && $kinds{'default message'}, 'both sent the logical message');

done_testing();
