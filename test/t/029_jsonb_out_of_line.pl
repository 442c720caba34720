# jsonb values of every storage: short (1-byte header), inline, compressed
# inline, and out of line, through an initial snapshot (the heap's TOAST
# pointers) and the stream (the reorder buffer's indirect pointers to the
# values it put back together, and unchanged ones left as they were).  The
# encoder copies a short value before reading it in place; a TOAST pointer
# has a 1-byte header too and must not be taken for one.
#
# versions: all (TOAST pointers and the decoded tuple's layout)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('jsonb_toast');
my $stream_sink = ReplicantTest::start_sink(name => 'stream_sink');
my $snapshot_sink = ReplicantTest::start_sink(name => 'snapshot_sink');

# doc(n, seed): an object of n members whose strings do not compress.
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE FUNCTION doc(n int, seed int) RETURNS jsonb LANGUAGE sql AS
  $$ SELECT jsonb_object_agg('m' || i, md5((i * seed)::text) || md5((i + seed)::text))
       FROM generate_series(1, n) i $$;
CREATE TABLE j (id int PRIMARY KEY, n int, ext jsonb, main jsonb, small jsonb);
ALTER TABLE j ALTER COLUMN ext SET STORAGE EXTERNAL;
CREATE PUBLICATION j_pub FOR TABLE j;
});

# js streams every row; jt reads them in its initial snapshot.
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('js', 'j_pub', '$stream_sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'js'"),
	'js streams');
$node->safe_psql('postgres', q{
INSERT INTO j SELECT g, 0, doc(100, g), jsonb_build_object('r', repeat('ab', 3000)),
                     jsonb_build_array(g, 'x')
  FROM generate_series(1, 20) g;
});
is($node->safe_psql('postgres', q{
	SELECT bool_and(pg_column_size(ext) > 2000 AND pg_column_size(main) < 1000 AND pg_column_size(small) < 127)
	  FROM j}), 't', 'out of line, compressed inline and short values in the table');
ok(ReplicantTest::wait_until_synced($node, 'postgres', $stream_sink, ['j'], 120),
	'the stream delivers the values put back together');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('jt', 'j_pub', '$snapshot_sink->{url}', snapshot => 'initial')");
ok(ReplicantTest::wait_until_synced($node, 'postgres', $snapshot_sink, ['j'], 120),
	'the snapshot delivers every value');

$node->safe_psql('postgres', q{
INSERT INTO j SELECT g, 0, doc(100, g), jsonb_build_object('r', repeat('cd', 3000)), 'null'
  FROM generate_series(21, 30) g;
UPDATE j SET n = n + 1 WHERE id % 2 = 0;
UPDATE j SET ext = doc(120, -id) WHERE id % 3 = 0;
DELETE FROM j WHERE id % 5 = 0;
});
foreach my $sink ($stream_sink, $snapshot_sink)
{
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['j'], 120),
		"$sink->{name}: every value, put back together, unchanged or new");
}
is($node->safe_psql('postgres', "SELECT string_agg(state, ',' ORDER BY pipeline) FROM replicant.status"),
	'streaming,streaming', 'both pipelines stream');
unlike(slurp_file($node->logfile), qr/terminated by signal/, 'no process crashed');

done_testing();
