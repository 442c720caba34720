# Generated columns on PostgreSQL 18, as its pgoutput publishes them: stored
# generated columns only with publish_generated_columns = stored (or when a
# column list names them), on the stream and the snapshot alike; virtual
# generated columns have no stored value, so neither path delivers them,
# and dropping one does not halt the pipeline.  (Before 18 generated
# columns are never published: 043_column_list.pl.)
#
# versions: all (generated columns differ per version)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('gencols');
plan skip_all => 'virtual generated columns exist from PostgreSQL 18 on'
  if $node->pg_version < 18;
my $sink = ReplicantTest::start_sink(keep_bodies => 1);

# Waits until the sink's rows of $table are the source's $select.
sub sink_has
{
	my ($table, $select, $name) = @_;
	my $expected = ReplicantTest::source_rows($node, 'postgres', "($select)");
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $sunk;
	while (1)
	{
		$sunk = $sink->dump($table);
		last if $sunk eq $expected || time() > $deadline;
		usleep(200_000);
	}
	is($sunk, $expected, $name);
}

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE g (id int PRIMARY KEY, a int,
  s int GENERATED ALWAYS AS (a * 2) STORED,
  v int GENERATED ALWAYS AS (a * 3) VIRTUAL);
INSERT INTO g (id, a) VALUES (1, 10), (2, 20);
CREATE PUBLICATION g_pub FOR TABLE g WITH (publish_generated_columns = stored);
CREATE TABLE n (id int PRIMARY KEY, a int,
  s int GENERATED ALWAYS AS (a * 2) STORED,
  v int GENERATED ALWAYS AS (a * 3) VIRTUAL);
INSERT INTO n (id, a) VALUES (1, 10);
CREATE PUBLICATION n_pub FOR TABLE n WITH (publish_generated_columns = none);
CREATE TABLE l (id int PRIMARY KEY, a int, s int GENERATED ALWAYS AS (a * 2) STORED);
INSERT INTO l (id, a) VALUES (1, 10);
CREATE PUBLICATION l_pub FOR TABLE l (id, s);
CREATE TABLE f (a int, b text, s int GENERATED ALWAYS AS (a * 2) STORED);
ALTER TABLE f REPLICA IDENTITY FULL;
INSERT INTO f (a, b) VALUES (1, 'one');
CREATE PUBLICATION f_pub FOR TABLE f WITH (publish_generated_columns = stored);
CREATE TABLE fn (a int, b text, s int GENERATED ALWAYS AS (a * 2) STORED);
ALTER TABLE fn REPLICA IDENTITY FULL;
INSERT INTO fn (a, b) VALUES (1, 'one');
CREATE PUBLICATION fn_pub FOR TABLE fn;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('g', '{g_pub,n_pub,l_pub,f_pub,fn_pub}'::text[], '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('postgres', q{
INSERT INTO g (id, a) VALUES (3, 30);
UPDATE g SET a = 11 WHERE id = 1;
INSERT INTO n (id, a) VALUES (2, 20);
INSERT INTO l (id, a) VALUES (2, 20);
});
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.g']),
	'snapshot and stream: the sink equals the source');
my $rows = $sink->dump('public.g');
like($rows, qr/"s":22\b/, 'publish_generated_columns = stored: the stored generated column is delivered');
unlike($rows, qr/"v":/, 'the virtual generated column is not delivered');
sink_has('public.n', 'SELECT id, a FROM n',
	'publish_generated_columns = none: no generated column');
sink_has('public.l', 'SELECT id, s FROM l',
	'a column list naming the stored generated column publishes it');

# REPLICA IDENTITY FULL without a primary key: the key is the published row,
# the stored generated column in it exactly when new has it.
$node->safe_psql('postgres', q{
INSERT INTO f (a, b) VALUES (2, 'two');
UPDATE f SET b = 'uno' WHERE a = 1;
DELETE FROM f WHERE a = 2;
INSERT INTO fn (a, b) VALUES (2, 'two');
});
# fn's replica identity holds a generated column its publication does not
# publish: the server refuses its updates and deletes.
my ($ret, $out, $err) = $node->psql('postgres', 'DELETE FROM fn');
like($err, qr/Replica identity must not contain unpublished generated columns/,
	'fn: the server refuses a delete');
ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('g', pg_current_wal_lsn(), 60000)"),
	'REPLICA IDENTITY FULL tables delivered');
foreach my $t ([ 'f', [qw(a b s)], 4 ], [ 'fn', [qw(a b)], 2 ])
{
	my @changes = grep { $_->{table} eq $t->[0] }
	  map { @{ $_->{body}{changes} // [] }, map { @{ $_->{changes} } } @{ $_->{body}{transactions} // [] } }
	  @{ $sink->bodies };
	is(scalar(@changes), $t->[2], "$t->[0]: every change arrived");
	foreach my $c (@changes)
	{
		is_deeply([ sort keys %{ $c->{key} } ], $t->[1], "$t->[0] $c->{op}: key has (@{ $t->[1] })");
		is_deeply([ sort keys %{ $c->{new} // $c->{old} } ], $t->[1], "$t->[0] $c->{op}: and so has the row");
	}
}

$node->safe_psql('postgres', q{
ALTER TABLE g DROP COLUMN v;
INSERT INTO g (id, a) VALUES (4, 40);
});
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.g']),
	'dropping the virtual column does not halt the pipeline');
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'g'"),
	'streaming', 'still streaming');

done_testing();
