# Partitioned tables, after PostgreSQL's src/test/subscription/t/013_partition.pl
# (publisher-side scenarios), the sink measured against a PostgreSQL
# subscriber of the same publications:
#
#   publish_via_partition_root = true
#     changes to every partition (other column orders, dropped columns, a
#       sub-partitioned partition) arrive under the root's schema, name,
#       columns and key; the initial snapshot reads every partition and
#       delivers it under the root
#     a row moved to another partition by a key update: delete + insert
#     a partition attached later: its changes from the attach on, under the
#       root; rows it held before are not delivered (the subscriber never
#       copies them either; the test leaves them untouched, since a sink
#       upserts an update of a row it lacks where a subscriber skips it); a
#       detached partition's later changes are not delivered, its rows stay
#     TRUNCATE of one partition is not delivered (its rows stay at the
#       subscriber); TRUNCATE of the root is, under the root's name only
#     a FOR TABLES IN SCHEMA publication with a partitioned table, one of
#       whose partitions lives in another schema
#     replicant.backfill of a partition (keyset and ctid): its rows under the
#       root; of the partitioned table itself: refused
#   publish_via_partition_root = false (the default)
#     every leaf under its own name; a partitioned table's truncate arrives as
#       its leaves'; a partition attached later is delivered from the attach
#       on, a detached one no more
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

my $node = ReplicantTest::new_node('publisher');
my $sub = ReplicantTest::new_node('subscriber');

sub query { return $node->safe_psql('postgres', @_); }
sub poll { return ReplicantTest::poll($node, @_); }

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;

-- The root has a dropped column; its partitions order columns differently.
CREATE TABLE tab (a int NOT NULL, gone int, b text, c int, PRIMARY KEY (a)) PARTITION BY RANGE (a);
ALTER TABLE tab DROP COLUMN gone;
CREATE TABLE tab_1 PARTITION OF tab FOR VALUES FROM (0) TO (100);
CREATE TABLE tab_2 (c int, x int, b text, a int NOT NULL);
ALTER TABLE tab_2 DROP COLUMN x;
ALTER TABLE tab ATTACH PARTITION tab_2 FOR VALUES FROM (100) TO (200);
CREATE TABLE tab_3 PARTITION OF tab FOR VALUES FROM (200) TO (300) PARTITION BY RANGE (a);
CREATE TABLE tab_3a (b text, a int NOT NULL, c int);
ALTER TABLE tab_3 ATTACH PARTITION tab_3a FOR VALUES FROM (200) TO (300);
INSERT INTO tab VALUES (1, 'one', 1), (2, 'two', 2), (101, 'hundred one', 101), (201, 'two hundred one', 201);

-- The same shape, published leaf by leaf.
CREATE TABLE lv (a int PRIMARY KEY, b text) PARTITION BY RANGE (a);
CREATE TABLE lv_1 PARTITION OF lv FOR VALUES FROM (0) TO (100);
CREATE TABLE lv_2 (b text, a int NOT NULL);
ALTER TABLE lv ATTACH PARTITION lv_2 FOR VALUES FROM (100) TO (200);
INSERT INTO lv VALUES (1, 'one'), (101, 'hundred one');

CREATE SCHEMA s;
CREATE TABLE s.parted (k int PRIMARY KEY, v text) PARTITION BY LIST (k);
CREATE TABLE s.parted_a PARTITION OF s.parted FOR VALUES IN (1, 2, 3);
CREATE TABLE public.parted_elsewhere PARTITION OF s.parted FOR VALUES IN (4, 5, 6);
INSERT INTO s.parted VALUES (1, 'a'), (4, 'elsewhere');

CREATE PUBLICATION pub_root FOR TABLE tab WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_schema FOR TABLES IN SCHEMA s WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_leaves FOR TABLE lv;
});

# The subscriber has plain tables named as what each publication delivers;
# replicant's encoder there turns its rows into the sink's shape.
$sub->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE tab (a int PRIMARY KEY, b text, c int);
CREATE SCHEMA s;
CREATE TABLE s.parted (k int PRIMARY KEY, v text);
});
my $connstr = $node->connstr . ' dbname=postgres';
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION sub_root CONNECTION '$connstr' PUBLICATION pub_root, pub_schema");
$sub->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')")
  or die 'the subscription did not sync';

my $sink = ReplicantTest::start_sink(name => 'sink_root', keep_bodies => 1);
query("SELECT replicant.create_pipeline('p_root', ARRAY['pub_root', 'pub_schema'], '$sink->{url}',"
	  . " snapshot => 'initial')");
my $sink_lv = ReplicantTest::start_sink(name => 'sink_leaves', keep_bodies => 1);
query("SELECT replicant.create_pipeline('p_leaves', 'pub_leaves', '$sink_lv->{url}',"
	  . " snapshot => 'initial')");
ok(poll("SELECT count(*) = 2 FROM replicant.status WHERE state = 'streaming'"),
	'both pipelines stream after their snapshots');

sub delivered
{
	my ($pipeline) = @_;
	ok(poll("SELECT replicant.await_delivered('$pipeline', pg_current_wal_lsn(), 60000)"),
		"$pipeline: delivered up to now");
}

sub subscriber_caught_up
{
	$node->wait_for_catchup('sub_root');
}

# The sink's rows of $table equal the subscriber's.
sub same_as_subscriber
{
	my ($table, $what) = @_;
	delivered('p_root');
	subscriber_caught_up();
	is($sink->dump($table), ReplicantTest::source_rows($sub, 'postgres', $table),
		"$what: the sink holds what the subscriber holds");
}

# ---- via root: the snapshot -----------------------------------------------------
is($sink->dump('public.tab'),
	ReplicantTest::source_rows($node, 'postgres', 'tab'),
	'snapshot: every partition read and delivered under the root');
same_as_subscriber('public.tab', 'snapshot');
same_as_subscriber('s.parted', 'schema publication snapshot');
{
	my @snap = grep { $_->{kind} eq 'snapshot' } map { $_->{body} } @{ $sink->bodies };
	my %names = map { ("$_->{snapshot}{schema}.$_->{snapshot}{table}" => 1) } @snap;
	is(join(',', sort keys %names), 'public.tab,s.parted',
		'snapshot: batches and markers name the roots only');
	my %read_names = map { ("$_->{schema}.$_->{table}" => 1) } map { @{ $_->{changes} } } @snap;
	is(join(',', sort keys %read_names), 'public.tab,s.parted', 'snapshot: reads name the roots only');
}

# ---- via root: the stream -------------------------------------------------------
query(q{
INSERT INTO tab VALUES (3, 'three', 3), (102, 'hundred two', 102), (202, 'two hundred two', 202);
UPDATE tab SET b = 'ONE' WHERE a = 1;
UPDATE tab SET c = -101 WHERE a = 101;
UPDATE tab_3a SET b = 'direct' WHERE a = 201;
UPDATE tab SET a = 4 WHERE a = 3;
UPDATE tab SET a = 103 WHERE a = 2;
UPDATE tab SET a = 203 WHERE a = 102;
DELETE FROM tab WHERE a = 202;
INSERT INTO s.parted VALUES (2, 'b'), (5, 'five');
UPDATE s.parted SET k = 6 WHERE k = 4;
});
delivered('p_root');
is($sink->dump('public.tab'), ReplicantTest::source_rows($node, 'postgres', 'tab'),
	'stream: the sink equals the root');
same_as_subscriber('public.tab', 'stream');
same_as_subscriber('s.parted', 'schema publication stream');
{
	my @changes = grep { $_->{op} ne 'read' }
	  map { @{ $_->{changes} // [] } } map { @{ $_->{body}{transactions} // [] } } @{ $sink->bodies };
	my %names = map { ("$_->{schema}.$_->{table}" => 1) } @changes;
	is(join(',', sort keys %names), 'public.tab,s.parted', 'stream: changes name the roots only');
	my ($moved) = grep { $_->{op} eq 'insert' && $_->{new}{a} == 203 } @changes;
	is(join(',', sort keys %{ $moved->{new} }), 'a,b,c',
		"stream: a partition's row carries the root's live columns");
	is(JSON::PP->new->canonical->encode($moved->{key}), '{"a":203}', "stream: the root's key");
	my @move = grep { ($_->{key}{a} // -1) == 102 || ($_->{new}{a} // -1) == 203 } @changes;
	is(join(',', map { $_->{op} } @move), 'insert,delete,insert',
		'stream: a row moved to another partition: delete, then insert');
}

# ---- via root: attach and detach --------------------------------------------------
query(q{
CREATE TABLE tab_4 (c int, b text, a int NOT NULL);
INSERT INTO tab_4 VALUES (301, 'before attach', 301);
ALTER TABLE tab ATTACH PARTITION tab_4 FOR VALUES FROM (300) TO (400);
INSERT INTO tab VALUES (302, 'after attach', 302);
UPDATE tab SET b = 'updated after attach' WHERE a = 302;
INSERT INTO tab VALUES (303, 'another', 303);
});
same_as_subscriber('public.tab', 'attach');
like($sink->dump('public.tab'), qr/"b":"updated after attach"/,
	"attach: the attached partition's changes arrive under the root");
unlike($sink->dump('public.tab'), qr/"a":301\b/, 'attach: rows from before the attach are not delivered');
query(q{
ALTER TABLE tab DETACH PARTITION tab_1;
INSERT INTO tab_1 VALUES (50, 'detached', 50);
UPDATE tab_1 SET b = 'after detach' WHERE a = 1;
INSERT INTO tab VALUES (304, 'still attached', 304);
});
same_as_subscriber('public.tab', 'detach');
like($sink->dump('public.tab'), qr/"b":"ONE"/, 'detach: the detached rows stay as they were');
unlike($sink->dump('public.tab'), qr/"a":50\b/, 'detach: later changes of the detached table are not delivered');

# ---- via root: backfills ----------------------------------------------------------
{
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT replicant.backfill('p_root', 'tab')");
	like($err, qr/cannot backfill partitioned table "tab"/, 'backfill: a partitioned table is refused');
	for my $mode (qw(keyset ctid))
	{
		my $id = query("SELECT replicant.backfill('p_root', 'tab_2', mode => '$mode')");
		ok(poll("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id"),
			"backfill ($mode): a partition of the root is backfilled");
		my @reads = grep { ($_->{snapshot}{backfill_id} // -1) == $id }
		  map { $_->{body} } grep { $_->{body}{kind} eq 'snapshot' } @{ $sink->bodies };
		my @rows = map { @{ $_->{changes} } } @reads;
		is(join(',', sort map { "$_->{schema}.$_->{table}:$_->{key}{a}" } @rows),
			'public.tab:101,public.tab:103', "backfill ($mode): its rows under the root, by the root's key");
		is(join(',', sort keys %{ $rows[0]{new} }), 'a,b,c', "backfill ($mode): in the root's columns");
	}
	same_as_subscriber('public.tab', 'backfill');
}

# ---- via root: truncate -----------------------------------------------------------
query('TRUNCATE tab_2');
query("INSERT INTO tab VALUES (305, 'after partition truncate', 305)");
same_as_subscriber('public.tab', 'truncate of one partition');
like($sink->dump('public.tab'), qr/"a":103\b/, "truncate of one partition: its rows stay");
query('TRUNCATE s.parted');
same_as_subscriber('s.parted', 'truncate of the root');
is($sink->dump('s.parted'), '', 'truncate of the root: every row gone');
{
	my @truncates = grep { $_->{op} eq 'truncate' }
	  map { @{ $_->{changes} // [] } } map { @{ $_->{body}{transactions} // [] } } @{ $sink->bodies };
	is(join(',', map { "$_->{schema}.$_->{table}" } @truncates), 's.parted',
		'truncate: delivered once, under the root, and not for a partition alone');
}
query("INSERT INTO s.parted VALUES (3, 'c'), (4, 'd')");
same_as_subscriber('s.parted', 'after the truncate of the root');

# ---- leaf by leaf (publish_via_partition_root = false) ---------------------------
query(q{
INSERT INTO lv VALUES (2, 'two'), (102, 'hundred two');
UPDATE lv SET a = 103 WHERE a = 2;
CREATE TABLE lv_3 (b text, a int NOT NULL);
INSERT INTO lv_3 VALUES ('before attach', 201);
ALTER TABLE lv ATTACH PARTITION lv_3 FOR VALUES FROM (200) TO (300);
INSERT INTO lv VALUES (202, 'after attach');
ALTER TABLE lv DETACH PARTITION lv_1;
INSERT INTO lv_1 VALUES (5, 'detached');
});
delivered('p_leaves');
is($sink_lv->dump('public.lv_1'), ReplicantTest::run_sink_script(['canon'], '{"a":1,"b":"one"}'),
	'leaves: lv_1 under its own name, nothing after its detach');
is($sink_lv->dump('public.lv_2'), ReplicantTest::source_rows($node, 'postgres', 'lv_2'),
	'leaves: lv_2 under its own name, in its own columns');
is($sink_lv->dump('public.lv_3'),
	ReplicantTest::run_sink_script(['canon'], '{"a":202,"b":"after attach"}'),
	'leaves: an attached partition from the attach on');
query('TRUNCATE lv');
delivered('p_leaves');
{
	my @changes = map { @{ $_->{changes} // [] } }
	  map { @{ $_->{body}{transactions} // [] } } @{ $sink_lv->bodies };
	my %names = map { ("$_->{schema}.$_->{table}" => 1) } @changes;
	is(join(',', sort keys %names), 'public.lv_1,public.lv_2,public.lv_3',
		'leaves: changes name the leaves, never the partitioned table');
	is(join(',', sort map { $_->{table} } grep { $_->{op} eq 'truncate' } @changes), 'lv_2,lv_3',
		"leaves: the partitioned table's truncate arrives as its leaves'");
}
is($sink_lv->dump('public.lv_2') . $sink_lv->dump('public.lv_3'), '', 'leaves: truncated');

is(query("SELECT string_agg(state, ',') FROM replicant.status"), 'streaming,streaming',
	'nothing halted');
query("SELECT replicant.drop_pipeline('p_root')");
query("SELECT replicant.drop_pipeline('p_leaves')");
$sub->safe_psql('postgres', 'DROP SUBSCRIPTION sub_root');
done_testing();
