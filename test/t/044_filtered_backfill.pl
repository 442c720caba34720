# Backfills read what table synchronization would: only the rows that pass
# the publications' row filter, only the listed columns, in every read mode,
# while the stream filters the changes made meanwhile (rows moving out of and
# into the filter by a key change; a filter on an update publication may
# only use replica identity columns).
#
# versions: all (row filters and column lists)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('filtered_backfill');
my $sink = ReplicantTest::start_sink();

# Waits until the sink's rows of $table are the source's $select.
sub sink_has
{
	my ($table, $select, $name) = @_;
	my $expected = ReplicantTest::source_rows($node, 'postgres', "($select)");
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $sunk;
	while (1)
	{
		$sunk = $sink->dump("public.$table");
		last if $sunk eq $expected || time() > $deadline;
		usleep(200_000);
	}
	is($sunk, $expected, $name);
}

my @modes = ('keyset', 'bitmap', 'ctid');
$node->safe_psql('postgres', 'CREATE EXTENSION replicant');
foreach my $mode (@modes)
{
	$node->safe_psql('postgres', qq{
CREATE TABLE bf_$mode (id int PRIMARY KEY, a int, hidden text);
INSERT INTO bf_$mode SELECT g, g % 10, 'h' || g FROM generate_series(1, 3000) g;
});
}
$node->safe_psql('postgres',
	'CREATE PUBLICATION bf_pub FOR TABLE '
	  . join(', ', map { "bf_$_ (id, a) WHERE (id % 10 < 3)" } @modes));
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('bf', 'bf_pub', '$sink->{url}')");

foreach my $mode (@modes)
{
	my $id = $node->safe_psql('postgres',
		"SELECT replicant.backfill('bf', 'bf_$mode', mode => '$mode')");
	$node->safe_psql('postgres', qq{
UPDATE bf_$mode SET id = 5009 WHERE id = 1;
UPDATE bf_$mode SET id = 5000 WHERE id = 9;
UPDATE bf_$mode SET a = a + 100 WHERE id = 2;
DELETE FROM bf_$mode WHERE id = 10;
});
	ok($node->poll_query_until('postgres',
			"SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id"),
		"$mode backfill finishes");
	sink_has("bf_$mode", "SELECT id, a FROM bf_$mode WHERE id % 10 < 3",
		"$mode: the filtered rows, the listed columns");
}
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'bf'"),
	'streaming', 'still streaming');

done_testing();
