# Column lists (CREATE PUBLICATION ... FOR TABLE t (a, b)) and generated
# columns deliver what a PostgreSQL subscriber of the same publications
# receives: the scenarios of PostgreSQL's
# src/test/subscription/t/031_column_list.pl that publish leaf tables, with
# its expected rows, on the snapshot and the stream.  Different column lists
# for one table halt the pipeline, as the server refuses them.  Generated
# columns are not published before PostgreSQL 18, nor on 18 unless
# publish_generated_columns = stored (041 covers that).
#
# versions: all (column lists and generated columns)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use JSON::PP;
use MIME::Base64;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('collist');
my $sink = ReplicantTest::start_sink(keep_bodies => 1);

# Waits until the sink's rows of $table are the source's $select.
sub sink_has
{
	my ($db, $table, $select, $name) = @_;
	my $expected = ReplicantTest::source_rows($node, $db, "($select)");
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

sub state_of
{
	my ($db, $pipeline) = @_;
	return $node->safe_psql($db,
		"SELECT state || '|' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = '$pipeline'");
}

# The changes of table $table the sink received, in order.
sub changes_of
{
	my ($table) = @_;
	return [ grep { $_->{table} eq $table }
		  map { @{ $_->{body}{changes} // [] }, map { @{ $_->{changes} } } @{ $_->{body}{transactions} // [] } }
		  @{ $sink->bodies } ];
}

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE tab1 (a int PRIMARY KEY, "B" int, c int);
CREATE TABLE tab2 (a int PRIMARY KEY, b varchar, c int);
CREATE TABLE tab3 ("a'" int PRIMARY KEY, "B" varchar, "c'" int);
CREATE TYPE test_typ AS ENUM ('blue', 'red');
CREATE TABLE tab4 (a int PRIMARY KEY, b test_typ, c int, d text);
CREATE PUBLICATION pub1 FOR TABLE tab1 (a, "B"), tab3 ("a'", "c'"), tab4 (a, b, d);
INSERT INTO tab1 VALUES (1, 2, 3), (4, 5, 6);
INSERT INTO tab3 VALUES (1, 2, 3), (4, 5, 6);
INSERT INTO tab4 VALUES (1, 'red', 3, 'oh my'), (2, 'blue', 4, 'hello');
INSERT INTO tab2 VALUES (1, 'abc', 3);

CREATE TABLE tab5 (a int PRIMARY KEY, b int, c int, d int);
CREATE PUBLICATION pub2 FOR TABLE tab5 (a, b);
CREATE PUBLICATION pub3 FOR TABLE tab5 (a, b);
INSERT INTO tab5 VALUES (1, 11, 111, 1111), (2, 22, 222, 2222);

CREATE TABLE test_mix_4 (a int PRIMARY KEY, b int, c int, d int GENERATED ALWAYS AS (a + 1) STORED);
ALTER TABLE test_mix_4 DROP COLUMN c;
CREATE PUBLICATION pub_mix_7 FOR TABLE test_mix_4 (a, b);
CREATE PUBLICATION pub_mix_8 FOR TABLE test_mix_4;
INSERT INTO test_mix_4 VALUES (1, 2);

CREATE TABLE gen (id int PRIMARY KEY, a int, s int GENERATED ALWAYS AS (a * 2) STORED);
CREATE PUBLICATION pub_gen FOR TABLE gen;
INSERT INTO gen (id, a) VALUES (1, 10);

CREATE TABLE toasty (id int PRIMARY KEY, v int, outside text, inside text);
ALTER TABLE toasty ALTER COLUMN outside SET STORAGE EXTERNAL;
ALTER TABLE toasty ALTER COLUMN inside SET STORAGE EXTERNAL;
CREATE PUBLICATION pub_toast FOR TABLE toasty (id, v, inside);
INSERT INTO toasty VALUES (1, 1, repeat('o', 5000), repeat('i', 5000));
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('cl', '{pub1,pub2,pub3,pub_mix_7,pub_mix_8,pub_gen,pub_toast}'::text[], '$sink->{url}', snapshot => 'initial')");

sink_has('postgres', 'public.tab1', 'SELECT a, "B" FROM tab1', 'snapshot tab1: only (a, "B")');
sink_has('postgres', 'public.tab3', q{SELECT "a'", "c'" FROM tab3},
	'snapshot tab3: only ("a\'", "c\'")');
sink_has('postgres', 'public.tab4', 'SELECT a, b, d FROM tab4', 'snapshot tab4: only (a, b, d)');
sink_has('postgres', 'public.tab5', 'SELECT a, b FROM tab5',
	'snapshot tab5: two publications with the same column list');
sink_has('postgres', 'public.test_mix_4', 'SELECT a, b FROM test_mix_4',
	'snapshot test_mix_4: a list of every column but the generated one equals no list');
sink_has('postgres', 'public.gen', 'SELECT id, a FROM gen',
	'snapshot gen: the stored generated column is not published');
sink_has('postgres', 'public.toasty', 'SELECT id, v, inside FROM toasty',
	'snapshot toasty: only (id, v, inside)');

$node->safe_psql('postgres', q{
INSERT INTO tab1 VALUES (2, 3, 4), (5, 6, 7);
INSERT INTO tab3 VALUES (2, 3, 4), (5, 6, 7);
INSERT INTO tab4 VALUES (3, 'red', 5, 'foo'), (4, 'blue', 6, 'bar');
UPDATE tab1 SET "B" = 2 * "B" WHERE a = 1;
UPDATE tab1 SET c = 2 * c WHERE a = 4;
UPDATE tab3 SET "B" = "B" || ' updated' WHERE "a'" = 4;
UPDATE tab3 SET "c'" = 2 * "c'" WHERE "a'" = 1;
UPDATE tab4 SET b = 'blue', c = c * 2, d = d || ' updated' WHERE a = 1;
UPDATE tab4 SET b = 'red', c = c * 2, d = d || ' updated' WHERE a = 2;
INSERT INTO tab5 VALUES (3, 33, 333, 3333), (4, 44, 444, 4444);
INSERT INTO test_mix_4 VALUES (3, 4);
INSERT INTO gen (id, a) VALUES (2, 20);
UPDATE gen SET a = 11 WHERE id = 1;
UPDATE toasty SET v = 2;
});
sink_has('postgres', 'public.tab1', 'SELECT a, "B" FROM tab1',
	'stream tab1: 1|4, 2|3, 4|5, 5|6');
is($node->safe_psql('postgres', 'SELECT string_agg(a || \'|\' || "B", \',\' ORDER BY a) FROM tab1'),
	'1|4,2|3,4|5,5|6', 'tab1 holds the rows of PostgreSQL\'s test');
sink_has('postgres', 'public.tab3', q{SELECT "a'", "c'" FROM tab3},
	'stream tab3: 1|6, 2|4, 4|6, 5|7');
sink_has('postgres', 'public.tab4', 'SELECT a, b, d FROM tab4',
	'stream tab4: updates carry (a, b, d)');
sink_has('postgres', 'public.tab5', 'SELECT a, b FROM tab5',
	'stream tab5: overlapping publications with the same column list');
sink_has('postgres', 'public.test_mix_4', 'SELECT a, b FROM test_mix_4', 'stream test_mix_4');
sink_has('postgres', 'public.gen', 'SELECT id, a FROM gen',
	'stream gen: the stored generated column is not published');
sink_has('postgres', 'public.toasty', 'SELECT id, v, inside FROM toasty', 'stream toasty');

my ($update) = grep { $_->{op} eq 'update' } @{ changes_of('toasty') };
is_deeply($update->{unchanged}, ['inside'],
	'an unchanged TOAST column outside the list is not mentioned');
is_deeply([ sort keys %{ $update->{new} } ], [ 'id', 'v' ], 'new carries listed columns only');
is_deeply($update->{key}, { id => 1 }, 'the key is unaffected');

# The old row carries the listed columns only (REPLICA IDENTITY FULL needs
# every column listed on 15; here the key changes).
$node->safe_psql('postgres', q{
CREATE TABLE test_oldtuple_col (a int PRIMARY KEY, b int, c int);
ALTER PUBLICATION pub1 ADD TABLE test_oldtuple_col (a, b);
INSERT INTO test_oldtuple_col VALUES (1, 2, 3);
UPDATE test_oldtuple_col SET a = 2;
DELETE FROM test_oldtuple_col;
INSERT INTO test_oldtuple_col VALUES (3, 4, 5);
});
# The last insert keeps the awaited state non-empty: an empty sink would match
# an empty table before anything arrived.
sink_has('postgres', 'public.test_oldtuple_col', 'SELECT a, b FROM test_oldtuple_col',
	'stream test_oldtuple_col: inserted, moved, deleted and inserted again');
my @old = map { $_->{old} } grep { $_->{op} ne 'insert' } @{ changes_of('test_oldtuple_col') };
is_deeply(\@old, [ { a => 1 }, { a => 2 } ], 'old rows of update and delete: the key only');

# A table added to the publication later: its column list applies.
$node->safe_psql('postgres', q{
ALTER PUBLICATION pub1 ADD TABLE tab2 (a, b);
INSERT INTO tab2 VALUES (2, 'def', 6);
UPDATE tab2 SET c = 5 WHERE a = 1;
UPDATE tab2 SET b = 'xyz' WHERE a = 2;
});
sink_has('postgres', 'public.tab2', 'SELECT a, b FROM tab2',
	'tab2 added later: 1|abc, 2|xyz');
is(state_of('postgres', 'cl'), 'streaming|', 'pipeline cl still streaming');

# FOR ALL TABLES, or TABLES IN SCHEMA, beside a list of every column: all
# columns (a database of its own, so FOR ALL TABLES publishes nothing else).
$node->safe_psql('postgres', 'CREATE DATABASE mix');
$node->safe_psql('mix', q{
CREATE EXTENSION replicant;
CREATE TABLE test_mix_2 (a int PRIMARY KEY, b int, c int);
CREATE PUBLICATION pub_mix_3 FOR TABLE test_mix_2 (a, b, c);
CREATE PUBLICATION pub_mix_4 FOR ALL TABLES;
INSERT INTO test_mix_2 VALUES (1, 2, 3);
CREATE SCHEMA s3;
CREATE TABLE s3.test_mix_3 (a int PRIMARY KEY, b int, c int);
CREATE PUBLICATION pub_mix_5 FOR TABLE s3.test_mix_3 (a, b, c);
CREATE PUBLICATION pub_mix_6 FOR TABLES IN SCHEMA s3;
INSERT INTO s3.test_mix_3 VALUES (1, 2, 3);
});
$node->safe_psql('mix',
	"SELECT replicant.create_pipeline('mix', '{pub_mix_3,pub_mix_4}'::text[], '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('mix',
	"SELECT replicant.create_pipeline('mix2', '{pub_mix_5,pub_mix_6}'::text[], '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('mix', 'INSERT INTO test_mix_2 VALUES (4, 5, 6); INSERT INTO s3.test_mix_3 VALUES (4, 5, 6);');
ok(ReplicantTest::wait_until_synced($node, 'mix', $sink, [ 'test_mix_2', 's3.test_mix_3' ]),
	'FOR ALL TABLES / TABLES IN SCHEMA beside a list of every column: all columns');
$node->safe_psql('mix', "SELECT replicant.drop_pipeline('mix')");
$node->safe_psql('mix', "SELECT replicant.drop_pipeline('mix2')");

# Partitions published under their own names take their own FOR TABLE
# entry's list (publish_via_partition_root = false), whatever the root's;
# a partition published through its root's schema and directly with every
# column has no list.
$node->safe_psql('postgres', q{
CREATE TABLE test_part_c (a int, b int, c int) PARTITION BY LIST (a);
CREATE TABLE test_part_c_1 PARTITION OF test_part_c FOR VALUES IN (1, 3);
ALTER TABLE test_part_c_1 ADD PRIMARY KEY (a);
CREATE TABLE test_part_c_2 PARTITION OF test_part_c FOR VALUES IN (2, 4);
ALTER TABLE test_part_c_2 ADD PRIMARY KEY (b);
INSERT INTO test_part_c VALUES (1, 3, 5), (2, 4, 6);
CREATE PUBLICATION pub8 FOR TABLE test_part_c WITH (publish_via_partition_root = false);
ALTER PUBLICATION pub8 ADD TABLE test_part_c_1 (a, c);
ALTER PUBLICATION pub8 ADD TABLE test_part_c_2 (a, b);
CREATE SCHEMA s1;
CREATE TABLE s1.t (a int PRIMARY KEY, b int, c int) PARTITION BY RANGE (a);
CREATE TABLE t_1 PARTITION OF s1.t FOR VALUES FROM (1) TO (10);
CREATE PUBLICATION pub_s1 FOR TABLES IN SCHEMA s1;
CREATE PUBLICATION pub_t_1 FOR TABLE t_1 (a, b, c);
INSERT INTO s1.t VALUES (1, 2, 3);
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('parts', '{pub8,pub_s1,pub_t_1}'::text[], '$sink->{url}', snapshot => 'initial')");
$node->safe_psql('postgres', q{
INSERT INTO test_part_c VALUES (3, 7, 8), (4, 9, 10);
INSERT INTO s1.t VALUES (4, 5, 6);
});
sink_has('postgres', 'public.test_part_c_1', 'SELECT a, c FROM test_part_c_1',
	'test_part_c_1: its own list (a, c): 1|5, 3|8');
sink_has('postgres', 'public.test_part_c_2', 'SELECT a, b FROM test_part_c_2',
	'test_part_c_2: its own list (a, b): 2|4, 4|9');
sink_has('postgres', 'public.t_1', 'SELECT * FROM t_1',
	'through the root\'s schema and with every column listed: all columns');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('parts')");

# Different column lists for one table: the server refuses them, so does
# the pipeline, at its snapshot and when a publication changes later.
$node->safe_psql('postgres', q{
CREATE TABLE test_mix_1 (a int PRIMARY KEY, b int, c int);
CREATE PUBLICATION pub_mix_1 FOR TABLE test_mix_1 (a, b);
CREATE PUBLICATION pub_mix_2 FOR TABLE test_mix_1 (a, c);
INSERT INTO test_mix_1 VALUES (0, 0, 0);
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('mix1', '{pub_mix_1,pub_mix_2}'::text[], '$sink->{url}', snapshot => 'initial')");
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'mix1'"),
	'different column lists: the snapshot halts');
is(state_of('postgres', 'mix1'),
	'halted|publications publish different columns of table "public.test_mix_1" (column lists or publish_generated_columns differ), which PostgreSQL refuses too',
	'the reason says why');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('mix1')");

$node->safe_psql('postgres', 'ALTER PUBLICATION pub_mix_1 SET TABLE test_mix_1 (a, c)');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('mix1b', '{pub_mix_1,pub_mix_2}'::text[], '$sink->{url}')");
$node->safe_psql('postgres', 'INSERT INTO test_mix_1 VALUES (1, 1, 1)');
sink_has('postgres', 'public.test_mix_1', 'SELECT a, c FROM test_mix_1 WHERE a = 1',
	'the same lists: (a, c) streamed');
$node->safe_psql('postgres', q{
ALTER PUBLICATION pub_mix_1 SET TABLE test_mix_1 (a, b);
INSERT INTO test_mix_1 VALUES (2, 2, 2);
});
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'mix1b'"),
	'a column list changed to differ: the stream halts');
like(state_of('postgres', 'mix1b'), qr/^halted\|publications publish different columns of table "public.test_mix_1"/,
	'the stream says why');
sink_has('postgres', 'public.test_mix_1', 'SELECT a, c FROM test_mix_1 WHERE a = 1',
	'nothing of the refused change was delivered');

# ---- key: no column outside the list leaves the server --------------------------
# "key" is made of published columns only.  A table whose list leaves out a
# column of its replica identity has no key (null), as a table without
# identity (PostgreSQL refuses its UPDATE and DELETE while a publication
# publishes them with that list); under REPLICA IDENTITY FULL without a
# primary key, the key is the published row, and a stored generated column
# is in neither key nor new where it is not published (before 18, or on 18
# without publish_generated_columns = stored).  Every value outside the
# lists carries a marker that no request may hold: stream, snapshot and
# backfill, in the replicant and the CloudEvents format.
{
	my $MARK = 'UNLISTED-7c1e';
	my $keys_sink = ReplicantTest::start_sink(name => 'keys', keep_bodies => 1);
	my $keys_ce = ReplicantTest::start_sink(name => 'keys_ce', keep_bodies => 1);
	$node->safe_psql('postgres', 'CREATE DATABASE keys');
	$node->safe_psql('keys', qq{
CREATE EXTENSION replicant;
CREATE TABLE u (email text PRIMARY KEY, plan text);
CREATE PUBLICATION pub_u FOR TABLE u (plan) WITH (publish = 'insert');
CREATE TABLE audit (who text, action text, secret text);
ALTER TABLE audit REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_audit FOR TABLE audit (who, action) WITH (publish = 'insert');
CREATE TABLE gfull (a int NOT NULL, b text NOT NULL,
    g text GENERATED ALWAYS AS ('$MARK ' || b) STORED);
ALTER TABLE gfull REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_gfull FOR TABLE gfull;
INSERT INTO u VALUES ('$MARK one\@example.com', 'free');
INSERT INTO audit VALUES ('ann', 'login', '$MARK s1'), ('ann', 'login', '$MARK s2');
INSERT INTO gfull (a, b) VALUES (1, 'one'), (3, 'three');
});
	foreach my $p ([ 'keys_r', $keys_sink, 'replicant' ], [ 'keys_ce', $keys_ce, 'cloudevents' ])
	{
		$node->safe_psql('keys',
			"SELECT replicant.create_pipeline('$p->[0]', '{pub_u,pub_audit,pub_gfull}'::text[],"
			  . " '$p->[1]{url}', snapshot => 'initial', format => '$p->[2]')");
	}
	ok(ReplicantTest::poll($node,
			"SELECT count(*) = 2 FROM replicant.status WHERE state = 'streaming'", 60, 'keys'),
		'keys: both pipelines stream after their snapshots');
	$node->safe_psql('keys', qq{
INSERT INTO u VALUES ('$MARK two\@example.com', 'free');
INSERT INTO audit VALUES ('bob', 'logout', '$MARK s3');
INSERT INTO gfull (a, b) VALUES (2, 'two');
});
	# 18 refuses them: its replica identity holds an unpublished generated column.
	my $gfull_updates = $node->pg_version < 18;
	$node->safe_psql('keys', q{
UPDATE gfull SET b = 'uno' WHERE a = 1;
DELETE FROM gfull WHERE a = 2;
}) if $gfull_updates;
	foreach my $p (qw(keys_r keys_ce))
	{
		my @ids = map { $node->safe_psql('keys', "SELECT replicant.backfill('$p', '$_')") }
		  qw(u audit gfull);
		ok(ReplicantTest::poll($node,
				"SELECT count(*) = 3 FROM replicant.backfill_status WHERE state = 'done' AND id IN ("
				  . join(',', @ids) . ')', 60, 'keys'),
			"keys: $p: backfills of the three tables done");
		ok(ReplicantTest::poll($node,
				"SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 60000)", 90, 'keys'),
			"keys: $p: delivered up to now");
	}

	foreach my $s ($keys_sink, $keys_ce)
	{
		my @leaks = grep { index(decode_base64($_->{body_base64}), $MARK) >= 0 } @{ $s->raw_bodies };
		is(scalar(@leaks), 0, "keys: no request to $s->{name} holds a value outside the lists")
		  or diag(decode_base64($leaks[0]{body_base64}));
	}

	# The replicant format: what key is for each shape.
	my @changes = map { @{ $_->{body}{changes} // [] }, map { @{ $_->{changes} } } @{ $_->{body}{transactions} // [] } }
	  @{ $keys_sink->bodies };
	my %ops;
	foreach my $c (@changes)
	{
		$ops{"$c->{table} $c->{op}"}++;
		if ($c->{table} eq 'u' || $c->{table} eq 'audit')
		{
			is($c->{key}, undef, "keys: $c->{table} $c->{op}: the list leaves out the identity: key is null");
		}
		else
		{
			my $row = $c->{new} // $c->{old};
			is_deeply([ sort keys %{ $c->{key} } ], [ sort keys %$row ],
				"keys: gfull $c->{op}: key has the columns of the published row");
		}
	}
	is_deeply(\%ops,
		{ 'u read' => 3, 'u insert' => 1, 'audit read' => 5, 'audit insert' => 1,
		  'gfull read' => $gfull_updates ? 4 : 5, 'gfull insert' => 1,
		  $gfull_updates ? ('gfull update' => 1, 'gfull delete' => 1) : () },
		'keys: every change of the three tables, on every path');

	# CloudEvents ids of reads tell every row apart, whatever the list
	# leaves out (a keyed digest of the row's whole replica identity, or of
	# its place in the table without one): the two rows of audit that
	# differ only outside the list, and the rows of u, whose list leaves
	# out its primary key, each have their own id in every snapshot and
	# backfill (a consumer that drops repeated ids keeps them all).
	my (%ids, %request_seen);
	foreach my $body (map { decode_json(decode_base64($_->{body_base64})) }
		grep { !$request_seen{ $_->{webhook_id} }++ } @{ $keys_ce->raw_bodies })
	{
		foreach my $e (grep { $_->{type} eq 'io.replicant.read' } @$body)
		{
			$ids{"$e->{subject} $e->{backfillid}"}{ $e->{id} }++;
		}
	}
	foreach my $t ('public.audit', 'public.u')
	{
		my @reads = grep { /^\Q$t\E / } sort keys %ids;
		is(scalar(@reads), 2, "keys: CloudEvents: $t read by the snapshot and a backfill");
		is_deeply([ map { [ sort values %{ $ids{$_} } ] } @reads ],
			[ map { [ (1) x scalar(keys %{ $ids{$_} }) ] } @reads ],
			"keys: CloudEvents: no two reads of $t by one snapshot or backfill share an id");
	}
	$node->safe_psql('keys', "SELECT replicant.drop_pipeline('$_')") foreach qw(keys_r keys_ce);
	$keys_sink->stop;
	$keys_ce->stop;
}

done_testing();
