# A key column stored out of line (a primary key over 2 kB, STORAGE
# EXTERNAL) that an UPDATE leaves unchanged arrives as an unchanged TOAST
# pointer in the new tuple: the change's "key" still holds it, and "new"
# lists it in "unchanged" instead of a value.
#
# versions: all (the decoded tuple's layout, src/compat.h)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('toastkey');
my $sink = ReplicantTest::start_sink(keep_bodies => 1);
$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE tk (id text PRIMARY KEY, n int);
CREATE TABLE tk_full (id text PRIMARY KEY, n int);
ALTER TABLE tk_full REPLICA IDENTITY FULL;
CREATE TABLE tk_index (id text NOT NULL, n int);
CREATE UNIQUE INDEX tk_index_id ON tk_index (id);
ALTER TABLE tk_index REPLICA IDENTITY USING INDEX tk_index_id;
ALTER TABLE tk ALTER COLUMN id SET STORAGE EXTERNAL;
ALTER TABLE tk_full ALTER COLUMN id SET STORAGE EXTERNAL;
ALTER TABLE tk_index ALTER COLUMN id SET STORAGE EXTERNAL;
CREATE PUBLICATION tk_pub FOR TABLE tk, tk_full, tk_index;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('tk', 'tk_pub', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'tk'"),
	'streaming');
my @tables = qw(tk tk_full tk_index);
foreach my $t (@tables)
{
	$node->safe_psql('postgres', "INSERT INTO $t VALUES (repeat('k', 2500), 0)");
	$node->safe_psql('postgres', "UPDATE $t SET n = 1");
	$node->safe_psql('postgres', "DELETE FROM $t");
}
ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('tk', pg_current_wal_lsn(), 30000)", 60),
	'delivered');

my %change;
foreach my $req (@{ $sink->bodies })
{
	next unless ($req->{body}{kind} // '') eq 'changes';
	foreach my $txn (@{ $req->{body}{transactions} })
	{
		$change{"$_->{table} $_->{op}"} = $_ foreach @{ $txn->{changes} };
	}
}
my $id = 'k' x 2500;
foreach my $t (@tables)
{
	foreach my $op (qw(insert update delete))
	{
		my $c = $change{"$t $op"};
		is(ref $c->{key} eq 'HASH' ? ($c->{key}{id} // '<absent>') : '<no key>', $id,
			"$t $op: the out-of-line key is in \"key\"");
	}
	my $u = $change{"$t update"};
	ok(!exists $u->{new}{id} || $u->{new}{id} eq $id,
		"$t update: \"new\" never holds a placeholder for the key");
}
done_testing();
