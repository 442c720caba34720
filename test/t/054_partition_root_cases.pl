# The publish_via_partition_root cases of PostgreSQL's
# src/test/subscription/t/013_partition.pl ("replication using root table
# identity and schema"), the rows its subscribers end up with carried over
# as facts:
#
#   a root and its partition both listed: changes once, under the root
#   a partition listed without its root: under its own name
#   a mid-level partitioned table in one publication and FOR ALL TABLES in
#     another: under the topmost root, whatever the publications' order
#   updates within and across partitions, deletes
#   TRUNCATE of partitions delivered as their root: not delivered; of a
#     partition delivered as itself: delivered; of the roots: delivered
#   columns dropped and added on the root: the partitions' rows are mapped
#     anew
#
# versions: all (partition roots)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('viaroot_cases');

sub query { return $node->safe_psql('postgres', @_); }
sub poll { return ReplicantTest::poll($node, @_); }

# The "a" values a sink holds for a table, sorted.
sub values_of
{
	my ($sink, $table) = @_;
	return join(',', sort { $a <=> $b } map { /"a":(-?\d+)/ ? $1 : () } split /\n/, $sink->dump($table));
}

query(q{
CREATE EXTENSION replicant;
CREATE TABLE tab2 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
CREATE TABLE tab2_1 (b text, a int NOT NULL);
ALTER TABLE tab2 ATTACH PARTITION tab2_1 FOR VALUES IN (0, 1, 2, 3);
CREATE TABLE tab2_2 PARTITION OF tab2 FOR VALUES IN (5, 6);
CREATE TABLE tab3 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
CREATE TABLE tab3_1 PARTITION OF tab3 FOR VALUES IN (0, 1, 2, 3, 5, 6);
CREATE TABLE tab4 (a int PRIMARY KEY) PARTITION BY LIST (a);
CREATE TABLE tab4_1 PARTITION OF tab4 FOR VALUES IN (-1, 0, 1) PARTITION BY LIST (a);
CREATE TABLE tab4_1_1 PARTITION OF tab4_1 FOR VALUES IN (-1, 0, 1);
CREATE PUBLICATION pub_viaroot FOR TABLE tab2, tab2_1, tab3_1 WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_lower_level FOR TABLE tab4_1 WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_all FOR ALL TABLES WITH (publish_via_partition_root = true);
INSERT INTO tab2 VALUES (1);
INSERT INTO tab4 VALUES (-1);
});

my %sink = map { ($_ => ReplicantTest::start_sink(name => "sink_$_")) } qw(viaroot lower_all all_lower);
query("SELECT replicant.create_pipeline('viaroot', 'pub_viaroot', '$sink{viaroot}{url}', snapshot => 'initial')");
query("SELECT replicant.create_pipeline('lower_all', ARRAY['pub_lower_level', 'pub_all'], '$sink{lower_all}{url}', snapshot => 'initial')");
query("SELECT replicant.create_pipeline('all_lower', ARRAY['pub_all', 'pub_lower_level'], '$sink{all_lower}{url}', snapshot => 'initial')");
ok(poll("SELECT count(*) = 3 FROM replicant.status WHERE state = 'streaming'"), 'all three pipelines stream');

sub delivered
{
	for my $p (qw(viaroot lower_all all_lower))
	{
		ok(poll("SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 60000)"),
			"$p: delivered up to now");
	}
}

delivered();
is(values_of($sink{viaroot}, 'public.tab2'), '1', 'initial data synced for pub_viaroot');
for my $p (qw(lower_all all_lower))
{
	is(values_of($sink{$p}, 'public.tab4'), '-1', "$p: initial data of tab4 under the topmost root");
	is(values_of($sink{$p}, 'public.tab4_1'), '', "$p: nothing under the mid-level table");
}

query(q{
INSERT INTO tab2 VALUES (0), (3), (5);
INSERT INTO tab3 VALUES (1), (0), (3), (5);
INSERT INTO tab4 VALUES (0);
});
delivered();
is(values_of($sink{viaroot}, 'public.tab2'), '0,1,3,5', 'inserts into tab2 replicated');
is(values_of($sink{viaroot}, 'public.tab3_1'), '0,1,3,5', 'inserts into tab3_1 replicated under its own name');
is(values_of($sink{viaroot}, 'public.tab3'), '', 'nothing under tab3, which is not published');
for my $p (qw(lower_all all_lower))
{
	is(values_of($sink{$p}, 'public.tab4'), '-1,0', "$p: inserts into tab4 replicated");
	is(values_of($sink{$p}, 'public.tab4_1'), '', "$p: nothing under tab4_1");
	is(values_of($sink{$p}, 'public.tab3'), '0,1,3,5', "$p: FOR ALL TABLES: tab3 under its root");
}

query('UPDATE tab2 SET a = 6 WHERE a = 5');
query('UPDATE tab3 SET a = 6 WHERE a = 5');
delivered();
is(values_of($sink{viaroot}, 'public.tab2'), '0,1,3,6', 'update of tab2 replicated');
is(values_of($sink{viaroot}, 'public.tab3_1'), '0,1,3,6', 'update of tab3_1 replicated');

query('UPDATE tab2 SET a = 2 WHERE a = 6');
query('UPDATE tab3 SET a = 2 WHERE a = 6');
delivered();
is(values_of($sink{viaroot}, 'public.tab2'), '0,1,2,3', 'update of tab2 across partitions replicated');
is(values_of($sink{viaroot}, 'public.tab3_1'), '0,1,2,3', 'update of tab3_1 replicated');
is(values_of($sink{lower_all}, 'public.tab3'), '0,1,2,3', 'FOR ALL TABLES: update of tab3 replicated');

query('DELETE FROM tab2');
query('DELETE FROM tab3');
delivered();
is(values_of($sink{viaroot}, 'public.tab2') . values_of($sink{viaroot}, 'public.tab3_1'), '',
	'deletes replicated');

query('INSERT INTO tab2 VALUES (1), (2), (5)');
query('INSERT INTO tab3 VALUES (1), (2), (5)');
query('TRUNCATE tab2_1, tab3_1');
delivered();
is(values_of($sink{viaroot}, 'public.tab2'), '1,2,5', 'truncate of tab2_1 NOT replicated');
is(values_of($sink{viaroot}, 'public.tab3_1'), '', 'truncate of tab3_1, published as itself, replicated');
is(values_of($sink{all_lower}, 'public.tab3'), '1,2,5', 'FOR ALL TABLES: truncate of tab3_1 NOT replicated');

query('TRUNCATE tab2, tab3');
delivered();
is(values_of($sink{viaroot}, 'public.tab2'), '', 'truncate of tab2 replicated');
is(values_of($sink{all_lower}, 'public.tab2') . values_of($sink{all_lower}, 'public.tab3'), '',
	'FOR ALL TABLES: truncate of tab2 and tab3 replicated');

# The map from the partitions to the root's columns is built anew.
query(q{
ALTER TABLE tab2 DROP b, ADD COLUMN c text DEFAULT 'pub_tab2', ADD b text;
INSERT INTO tab2 (a, b) VALUES (1, 'xxx'), (3, 'yyy'), (5, 'zzz');
INSERT INTO tab2 (a, b, c) VALUES (6, 'aaa', 'xxx_c');
});
delivered();
is($sink{viaroot}->dump('public.tab2'), ReplicantTest::source_rows($node, 'postgres', 'tab2'),
	'inserts into tab2 after its columns changed replicated');

is(query("SELECT string_agg(state, ',') FROM replicant.status"), 'streaming,streaming,streaming',
	'nothing halted');
query("SELECT replicant.drop_pipeline('$_')") for qw(viaroot lower_all all_lower);

# ---- the leaf's replica identity, under the root's names ------------------------
# PostgreSQL checks a partition's own replica identity against the root's
# column list: with the root REPLICA IDENTITY FULL and no primary key, a
# leaf with PRIMARY KEY (id) and FOR TABLE m (id, v) WITH
# (publish_via_partition_root), the leaf's updates and deletes are
# published.  Their key is the leaf's identity under the root's names,
# "old" carries only what the leaf logged, the snapshot and a backfill key
# their reads alike, sink_ddl orders the root's target by that key, and
# the sinks apply every change (ClickHouse included).
query(q{
CREATE TABLE m (id int NOT NULL, v text, secret text) PARTITION BY RANGE (id);
ALTER TABLE m REPLICA IDENTITY FULL;
CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100);
ALTER TABLE m1 ADD PRIMARY KEY (id);
CREATE PUBLICATION pub_m FOR TABLE m (id, v) WITH (publish_via_partition_root = true);
INSERT INTO m VALUES (10, 'ten', 's10');
});
my $leafkey = ReplicantTest::start_sink(name => 'leafkey', keep_bodies => 1);
query("SELECT replicant.create_pipeline('leafkey', 'pub_m', '$leafkey->{url}', snapshot => 'initial')");
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'leafkey'"),
	'leaf identity: the snapshot is delivered');
query(q{
INSERT INTO m VALUES (1, 'one', 's1'), (2, 'two', 's2');
UPDATE m SET v = 'uno' WHERE id = 1;
DELETE FROM m WHERE id = 2;
});
my $m_backfill = query("SELECT replicant.backfill('leafkey', 'm1')");
ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $m_backfill"),
	'leaf identity: the backfill is done');
ok(poll("SELECT replicant.await_delivered('leafkey', pg_current_wal_lsn(), 60000)"),
	'leaf identity: delivered up to now');
{
	my %by_op;
	push @{ $by_op{ $_->{op} } }, $_ foreach grep { $_->{table} eq 'm' }
	  map { @{ $_->{body}{changes} // [] }, map { @{ $_->{changes} } } @{ $_->{body}{transactions} // [] } }
	  @{ $leafkey->bodies };
	my $json = JSON::PP->new->canonical;
	is($json->encode([ map { [ $_->{key}, $_->{old} ] } @{ $by_op{update} // [] } ]),
		'[[{"id":1},null]]', 'leaf identity: the update is keyed by the leaf primary key, no old row');
	is($json->encode([ map { [ $_->{key}, $_->{old} ] } @{ $by_op{delete} // [] } ]),
		'[[{"id":2},{"id":2}]]', 'leaf identity: the delete too, its old row only what the leaf logged');
	is($json->encode([ sort { $a->{id} <=> $b->{id} } map { $_->{key} } @{ $by_op{read} // [] } ]),
		'[{"id":1},{"id":10},{"id":10}]', 'leaf identity: the snapshot and the backfill key their reads alike');
}
is($leafkey->dump('public.m'), ReplicantTest::source_rows($node, 'postgres', '(SELECT id, v FROM m)'),
	'leaf identity: the sink applied the update and the delete');
like(query("SELECT replicant.sink_ddl(ARRAY['pub_m'])"),
	qr/ENGINE = ReplacingMergeTree\(_version\) ORDER BY \(`id`\)$/,
	"leaf identity: sink_ddl orders the root's target by the leaf key");
is(query("SELECT state FROM replicant.status WHERE pipeline = 'leafkey'"), 'streaming', 'leaf identity: nothing halted');
query("SELECT replicant.drop_pipeline('leafkey')");

SKIP:
{
	skip 'no clickhouse-server', 3 unless eval { require ClickHouse; ClickHouse::server_binary() };
	my $ch = ClickHouse->start;
	$ch->query_ok('CREATE DATABASE replica');
	query('TRUNCATE m');
	$ch->query_ok(query("SELECT replicant.sink_ddl(ARRAY['pub_m'])"), settings => { database => 'replica' });
	query("SELECT replicant.create_pipeline('leafkey_ch', 'pub_m', '$ch->{url}?database=replica', format => 'clickhouse')");
	ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'leafkey_ch'"),
		'leaf identity, ClickHouse: streaming');
	query(q{
INSERT INTO m VALUES (3, 'three', 's3'), (4, 'four', 's4');
UPDATE m SET v = 'tres' WHERE id = 3;
DELETE FROM m WHERE id = 4;
INSERT INTO m VALUES (5, 'five', 's5');
});
	ok(poll("SELECT state <> 'streaming' OR replicant.await_delivered('leafkey_ch', pg_current_wal_lsn(), 1000)"
			  . " FROM replicant.status WHERE pipeline = 'leafkey_ch'", 60),
		'leaf identity, ClickHouse: delivered, or stopped');
	my $rows = eval { $ch->select_rows('SELECT id, v FROM replica.m FINAL WHERE _deleted = 0 ORDER BY id') };
	is(query("SELECT state || coalesce(' ' || last_error, '') FROM replicant.status WHERE pipeline = 'leafkey_ch'")
		  . ' | ' . ($rows ? join(' ', map { "$_->{id}:$_->{v}" } @$rows) : $@),
		'streaming | 3:tres 5:five', 'leaf identity, ClickHouse: the update and the delete applied, nothing halted');
	query("SELECT replicant.drop_pipeline('leafkey_ch')");
	$ch->stop;
}
done_testing();
