# Generated columns by server version.  Stored generated columns are
# delivered on every version, whatever publish_generated_columns says (see
# README, Limitations); PostgreSQL 18's virtual generated columns have no
# stored value, so neither the stream nor a snapshot delivers them, and
# dropping one does not halt the pipeline.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('gencols');
plan skip_all => 'virtual generated columns exist from PostgreSQL 18 on'
  if $node->pg_version < 18;
my $sink = ReplicantTest::start_sink();

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE g (id int PRIMARY KEY, a int,
  s int GENERATED ALWAYS AS (a * 2) STORED,
  v int GENERATED ALWAYS AS (a * 3) VIRTUAL);
INSERT INTO g (id, a) VALUES (1, 10), (2, 20);
CREATE PUBLICATION g_pub FOR TABLE g WITH (publish_generated_columns = none);
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('g', 'g_pub', '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('postgres', q{
INSERT INTO g (id, a) VALUES (3, 30);
UPDATE g SET a = 11 WHERE id = 1;
});
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.g']),
	'snapshot and stream: the sink equals the source');
my $rows = $sink->dump('public.g');
like($rows, qr/"s":22\b/, 'the stored generated column is delivered');
unlike($rows, qr/"v":/, 'the virtual generated column is not delivered');

$node->safe_psql('postgres', q{
ALTER TABLE g DROP COLUMN v;
INSERT INTO g (id, a) VALUES (4, 40);
});
ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['public.g']),
	'dropping the virtual column does not halt the pipeline');
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'g'"),
	'streaming', 'still streaming');

done_testing();
