# The test library's kept sessions (test/ReplicantTest.pm, "safe_psql over a
# kept session"): a statement that safe_psql runs over the session kept per
# node behaves as under a psql of its own. Session state a statement sets
# does not outlive the call, a transaction left open fails the call (it is
# not committed by a later one), a write is seen by the next read, and an
# error fails the call and stops the statements after it.  The
# differential test's writes (Oracle.pm, try_sql) take the same session: one
# that loses its connection after the statements were sent is not run
# again (they may have run), and the call says so.
#
# versions: all (each version's PostgreSQL::Test::Cluster)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Oracle;

my $node = ReplicantTest::new_node('harness');
$node->safe_psql('postgres', 'CREATE TABLE t (id int)');
$node->safe_psql('postgres', "CREATE SCHEMA s; -- c\nSET search_path = s; CREATE TABLE u (id int)");
is($node->safe_psql('postgres', 'SHOW search_path'), '"$user", public', 'a SET after a comment does not outlive the call');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_tables WHERE schemaname = 's' AND tablename = 'u'"), '1', 'the write ran');
my $died = !eval { $node->safe_psql('postgres', "INSERT INTO t VALUES (1); -- c\nBEGIN; INSERT INTO t VALUES (2)"); 1 };
ok($died, 'a transaction left open fails the call');
like($@, qr/DISCARD ALL cannot run inside a transaction block/, 'with the reason');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), '1', 'the open transaction was not committed');
$node->safe_psql('postgres', 'INSERT INTO t VALUES (3); INSERT INTO t VALUES (4)');
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t'), '1,3,4', 'writes are seen by the next read');
$died = !eval { $node->safe_psql('postgres', 'INSERT INTO t VALUES (5); INSERT INTO nope VALUES (6); INSERT INTO t VALUES (7)'); 1 };
ok($died, 'an error fails the call');
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t'), '1,3,4,5', 'and stops at it');
# A write whose connection goes once it ran: the INSERT commits, then the
# function ends the backend.  psql reports a lost connection, which try_sql
# retries only when the statements never reached a session.
$node->safe_psql('postgres', "CREATE TABLE w (id int);"
	  . " CREATE FUNCTION bye() RETURNS void LANGUAGE sql AS 'SELECT pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid())'");
my $oracle = bless { pub => $node }, 'Oracle';
my ($ok, $out, $err) = $oracle->try_sql($node, 'INSERT INTO w VALUES (1); SELECT bye()', timeout => 20);
ok(!$ok, 'a write that lost its connection fails');
like($err, qr/lost after the statements were sent \(they may have run\)/, 'saying they may have run');
is($node->safe_psql('postgres', 'SELECT count(*) FROM w'), '1', 'and ran once');
done_testing();
