# What exactly reaches the sink (docs/sink-protocol.md): the change objects for
# every kind of replica identity and for TOAST, the transaction envelope,
# the request headers, publication membership (FOR TABLE, FOR ALL TABLES,
# FOR TABLES IN SCHEMA, publish actions, several publications, a table
# added later), and commit-to-sink latency.
#
# versions: all (publication membership and publish actions; old tuples, src/compat.h)
use strict;
use warnings;
use B;
use JSON::PP;
use List::Util qw(any max);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $SECRET = 'whsec_c2VjcmV0LWZvci10ZXN0cw==';

my $node = ReplicantTest::new_node('stream', conf => 'track_commit_timestamp = on');
my $sink = ReplicantTest::start_sink(secret => $SECRET, keep_bodies => 1);
my $sink_all = ReplicantTest::start_sink(name => 'sink_all', keep_bodies => 1);
my $sink_schema = ReplicantTest::start_sink(name => 'sink_schema', keep_bodies => 1);

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE marker (id serial PRIMARY KEY);
CREATE TABLE t_pk (id int PRIMARY KEY, v text, n int);
CREATE TABLE t_full_pk (id int PRIMARY KEY, v text, n int);
ALTER TABLE t_full_pk REPLICA IDENTITY FULL;
CREATE TABLE t_full_nokey (a int, b text);
ALTER TABLE t_full_nokey REPLICA IDENTITY FULL;
CREATE TABLE t_uidx (id int PRIMARY KEY, code text NOT NULL, v text);
CREATE UNIQUE INDEX t_uidx_code ON t_uidx (code);
ALTER TABLE t_uidx REPLICA IDENTITY USING INDEX t_uidx_code;
CREATE TABLE t_toast (id int PRIMARY KEY, big text, n int);
ALTER TABLE t_toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE t_multi_a (id int PRIMARY KEY, v text);
CREATE TABLE t_multi_b (id int PRIMARY KEY, v text);
CREATE TABLE t_lat (id int PRIMARY KEY);
CREATE TABLE t_batch (id int PRIMARY KEY);
CREATE TABLE t_late (id int PRIMARY KEY, v text);
CREATE TABLE t_never (id int PRIMARY KEY, v text);
CREATE TABLE t_ins (id int PRIMARY KEY, v text);
CREATE TABLE t_noident (a int, b text);
CREATE SCHEMA s1;
CREATE TABLE s1.marker (id serial PRIMARY KEY);
CREATE TABLE s1.items (id int PRIMARY KEY, v text);

CREATE PUBLICATION pub_tables FOR TABLE marker, t_pk, t_full_pk, t_full_nokey,
    t_uidx, t_toast, t_multi_a, t_multi_b, t_lat, t_batch;
CREATE PUBLICATION pub_ins FOR TABLE t_ins, t_noident WITH (publish = 'insert');
CREATE PUBLICATION pub_schema FOR TABLES IN SCHEMA s1;
CREATE PUBLICATION pub_all FOR ALL TABLES;
});

# Exact commit LSNs are checked against the WAL when pg_walinspect exists.
my $have_walinspect = $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_walinspect'");
$node->safe_psql('postgres', 'CREATE EXTENSION pg_walinspect') if $have_walinspect;
my $start_lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# The FOR ALL TABLES pipeline first: it then sees the other pipelines'
# catalog and checkpoint writes, which it must never deliver.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('everything', 'pub_all', '$sink_all->{url}')");
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('main', ARRAY['pub_tables', 'pub_ins'], '$sink->{url}', "
	  . "headers => '{\"X-Team\": \"data\"}', secret => '$SECRET')");
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('inschema', 'pub_schema', '$sink_schema->{url}')");
foreach my $pipeline ('everything', 'main', 'inschema')
{
	ok($node->poll_query_until('postgres',
			"SELECT state FROM replicant.status WHERE pipeline = '$pipeline'", 'streaming'),
		"pipeline $pipeline is streaming");
}

# ---- helpers ----------------------------------------------------------------

# Commits a marker row and waits until the sink has it: the sink then holds
# everything committed before (transactions arrive in commit order).
sub sync
{
	my ($sink, $marker, $what) = @_;
	$node->safe_psql('postgres', "INSERT INTO $marker DEFAULT VALUES");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [$marker]),
		"$what delivered");
}

# All delivered transactions, in arrival order.
sub transactions
{
	my ($sink) = @_;
	return [ map { @{ $_->{body}{transactions} // [] } } @{ $sink->bodies } ];
}

# The change objects the sink received for schema.table, in arrival order.
sub changes_for
{
	my ($sink, $table) = @_;
	my ($schema, $name) = split /\./, $table;
	return [
		grep { $_->{schema} eq $schema && $_->{table} eq $name }
		map  { @{ $_->{changes} } } @{ transactions($sink) }
	];
}

# Asserts the exact change objects of a table: the structure (is_deeply, for
# its diagnostics) and the JSON text, so that 1 and "1" differ too.
sub changes_are
{
	my ($sink, $table, $expected, $name) = @_;
	my $got = changes_for($sink, $table);
	my $json = JSON::PP->new->canonical;
	my $got_json = $json->encode($got);    # before is_deeply reads values as strings
	is_deeply($got, $expected, $name);
	is($got_json, $json->encode($expected), "$name (JSON types)");
}

# Runs SQL that ends with "SELECT pg_current_xact_id()::xid"; returns the xid.
sub xid_of
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# True if a freshly decoded JSON value was an integer (not a string) in the
# JSON text.  Must be asked before the value is used as a string.
sub json_integer
{
	my ($value) = @_;
	return 0 if !defined $value || ref $value;
	my $flags = B::svref_2object(\$value)->FLAGS;
	return ($flags & B::SVf_IOK) && !($flags & B::SVf_POK);
}

# ---- workload ---------------------------------------------------------------

# Primary key, default identity: every op, one statement per transaction.
$node->safe_psql('postgres', q{
INSERT INTO t_pk VALUES (1, 'a', 10);
UPDATE t_pk SET v = 'b' WHERE id = 1;
UPDATE t_pk SET id = 2 WHERE id = 1;
DELETE FROM t_pk WHERE id = 2;
INSERT INTO t_pk VALUES (3, 'c', 30);
TRUNCATE t_pk;
});

# REPLICA IDENTITY FULL, with and without a primary key.
$node->safe_psql('postgres', q{
INSERT INTO t_full_pk VALUES (1, 'a', 1);
UPDATE t_full_pk SET v = 'b' WHERE id = 1;
UPDATE t_full_pk SET id = 2 WHERE id = 1;
DELETE FROM t_full_pk WHERE id = 2;
INSERT INTO t_full_nokey VALUES (1, 'x');
UPDATE t_full_nokey SET b = 'y' WHERE a = 1;
DELETE FROM t_full_nokey WHERE a = 1;
});

# REPLICA IDENTITY USING INDEX: the identity is code, not the primary key id.
$node->safe_psql('postgres', q{
INSERT INTO t_uidx VALUES (1, 'c1', 'a');
UPDATE t_uidx SET v = 'b' WHERE id = 1;
UPDATE t_uidx SET id = 5 WHERE id = 1;
UPDATE t_uidx SET code = 'c2' WHERE id = 5;
DELETE FROM t_uidx WHERE id = 5;
});

# No identity at all, in the insert-only publication; and a keyed table in
# the insert-only publication, whose other actions must not arrive.
$node->safe_psql('postgres', q{
INSERT INTO t_noident VALUES (1, 'x'), (1, 'x');
INSERT INTO t_ins VALUES (1, 'a');
UPDATE t_ins SET v = 'b' WHERE id = 1;
DELETE FROM t_ins WHERE id = 1;
INSERT INTO t_ins VALUES (2, 'c');
TRUNCATE t_ins;
INSERT INTO t_ins VALUES (3, 'd');
});

# TOAST: big is stored out of line, uncompressed.
my $big1 = 'abcdefghij' x 600;
my $big2 = 'klmnopqrst' x 600;
$node->safe_psql('postgres', q{
INSERT INTO t_toast VALUES (1, repeat('abcdefghij', 600), 0);
UPDATE t_toast SET n = 1 WHERE id = 1;
UPDATE t_toast SET big = repeat('klmnopqrst', 600) WHERE id = 1;
});
is($node->safe_psql('postgres',
		"SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class WHERE oid = 't_toast'::regclass"),
	't', 'premise: big is TOASTed out of line');

sync($sink, 'public.marker', 'first part of the workload');

# keep_bodies survives a sink restart.
my $url = $sink->{url};
$sink->restart;
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('main', sink_url => '$sink->{url}')")
  if $sink->{url} ne $url;

# Several transactions in one batch: committed while the pipeline is disabled.
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('main')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replicant pipeline main'"),
	'main pipeline disabled');
$node->safe_psql('postgres', q{
INSERT INTO t_batch VALUES (1);
INSERT INTO t_batch VALUES (2);
INSERT INTO t_batch VALUES (3);
});
$node->safe_psql('postgres', "SELECT replicant.enable_pipeline('main')");

# One transaction of several statements, with a subtransaction rolled back
# and a change of an unpublished table in the middle.
my $multi_xid = xid_of(q{
BEGIN;
INSERT INTO t_multi_a VALUES (1, 'a1');
INSERT INTO t_multi_b VALUES (1, 'b1');
UPDATE t_multi_a SET v = 'a2' WHERE id = 1;
SAVEPOINT s;
INSERT INTO t_multi_a VALUES (98, 'rolled back to savepoint');
ROLLBACK TO SAVEPOINT s;
INSERT INTO t_never VALUES (1, 'in a published transaction');
DELETE FROM t_multi_b WHERE id = 1;
SELECT pg_current_xact_id()::xid;
COMMIT;
});
my $rolled_back_xid = xid_of(q{
BEGIN;
INSERT INTO t_multi_a VALUES (99, 'rolled back');
SELECT pg_current_xact_id()::xid;
ROLLBACK;
});
my $unpublished_xid = xid_of(q{
BEGIN;
INSERT INTO t_never VALUES (2, 'only unpublished');
UPDATE t_never SET v = 'still unpublished' WHERE id = 2;
SELECT pg_current_xact_id()::xid;
COMMIT;
});
$node->safe_psql('postgres', 'DELETE FROM t_never; TRUNCATE t_never');

# A table added to a publication while the pipeline streams.
$node->safe_psql('postgres', "INSERT INTO t_late VALUES (1, 'before the add')");
$node->safe_psql('postgres', 'ALTER PUBLICATION pub_tables ADD TABLE t_late');
$node->safe_psql('postgres', "INSERT INTO t_late VALUES (2, 'after the add')");

# Tables created after the pipelines started.
$node->safe_psql('postgres', q{
CREATE TABLE t_after (id int PRIMARY KEY, v text);
INSERT INTO t_after VALUES (1, 'created after the pipeline');
INSERT INTO s1.items VALUES (1, 'x');
CREATE TABLE s1.later (id int PRIMARY KEY);
INSERT INTO s1.later VALUES (7);
});

sync($sink, 'public.marker', 'whole workload to the main sink');
sync($sink_all, 'public.marker', 'whole workload to the FOR ALL TABLES sink');
sync($sink_schema, 's1.marker', 'whole workload to the FOR TABLES IN SCHEMA sink');

# ---- change shapes ----------------------------------------------------------

my %T = (schema => 'public', table => 't_pk');
changes_are($sink, 'public.t_pk',
	[
		{ op => 'insert', %T, key => { id => 1 }, new => { id => 1, v => 'a', n => 10 } },
		{
			op => 'update', %T,
			key => { id => 1 },
			new => { id => 1, v => 'b', n => 10 },
			old => undef,
			unchanged => []
		},
		{
			op => 'update', %T,
			key => { id => 1 },
			new => { id => 2, v => 'b', n => 10 },
			old => { id => 1 },
			unchanged => []
		},
		{ op => 'delete', %T, key => { id => 2 }, old => { id => 2 } },
		{ op => 'insert', %T, key => { id => 3 }, new => { id => 3, v => 'c', n => 30 } },
		{ op => 'truncate', %T },
	],
	'primary key: insert, update, key-changing update (key is the old key), delete, truncate');

%T = (schema => 'public', table => 't_full_pk');
changes_are($sink, 'public.t_full_pk',
	[
		{ op => 'insert', %T, key => { id => 1 }, new => { id => 1, v => 'a', n => 1 } },
		{
			op => 'update', %T,
			key => { id => 1 },
			new => { id => 1, v => 'b', n => 1 },
			old => { id => 1, v => 'a', n => 1 },
			unchanged => []
		},
		{
			op => 'update', %T,
			key => { id => 1 },
			new => { id => 2, v => 'b', n => 1 },
			old => { id => 1, v => 'b', n => 1 },
			unchanged => []
		},
		{ op => 'delete', %T, key => { id => 2 }, old => { id => 2, v => 'b', n => 1 } },
	],
	'REPLICA IDENTITY FULL with a primary key: key is the pk, old the whole old row');

%T = (schema => 'public', table => 't_full_nokey');
changes_are($sink, 'public.t_full_nokey',
	[
		{ op => 'insert', %T, key => { a => 1, b => 'x' }, new => { a => 1, b => 'x' } },
		{
			op => 'update', %T,
			key => { a => 1, b => 'x' },
			new => { a => 1, b => 'y' },
			old => { a => 1, b => 'x' },
			unchanged => []
		},
		{ op => 'delete', %T, key => { a => 1, b => 'y' }, old => { a => 1, b => 'y' } },
	],
	'REPLICA IDENTITY FULL without a key: key is the whole (old) row');

%T = (schema => 'public', table => 't_uidx');
changes_are($sink, 'public.t_uidx',
	[
		{
			op => 'insert', %T,
			key => { code => 'c1' },
			new => { id => 1, code => 'c1', v => 'a' }
		},
		{
			op => 'update', %T,
			key => { code => 'c1' },
			new => { id => 1, code => 'c1', v => 'b' },
			old => undef,
			unchanged => []
		},
		{
			op => 'update', %T,
			key => { code => 'c1' },
			new => { id => 5, code => 'c1', v => 'b' },
			old => undef,
			unchanged => []
		},
		{
			op => 'update', %T,
			key => { code => 'c1' },
			new => { id => 5, code => 'c2', v => 'b' },
			old => { code => 'c1' },
			unchanged => []
		},
		{ op => 'delete', %T, key => { code => 'c2' }, old => { code => 'c2' } },
	],
	'REPLICA IDENTITY USING INDEX: key is the index columns, not the primary key');

%T = (schema => 'public', table => 't_noident');
changes_are($sink, 'public.t_noident',
	[
		{ op => 'insert', %T, key => undef, new => { a => 1, b => 'x' } },
		{ op => 'insert', %T, key => undef, new => { a => 1, b => 'x' } },
	],
	'no identity at all: key is null');

%T = (schema => 'public', table => 't_toast');
changes_are($sink, 'public.t_toast',
	[
		{ op => 'insert', %T, key => { id => 1 }, new => { id => 1, big => $big1, n => 0 } },
		{
			op => 'update', %T,
			key => { id => 1 },
			new => { id => 1, n => 1 },
			old => undef,
			unchanged => ['big']
		},
		{
			op => 'update', %T,
			key => { id => 1 },
			new => { id => 1, big => $big2, n => 1 },
			old => undef,
			unchanged => []
		},
	],
	'TOAST: an untouched big column is absent from new and listed in unchanged');

# ---- transactions -----------------------------------------------------------

my $bodies = $sink->bodies;
my @txns = map { @{ $_->{body}{transactions} // [] } } @$bodies;

# Types first: asking for a value as a string could change how it looks.
is_deeply([ grep { !json_integer($_->{xid}) } @txns ], [], 'every xid is a JSON integer');
is_deeply([ grep { !json_integer($_->{commit_lsn}) } @txns ], [],
	'every commit_lsn is a JSON integer');

is_deeply(
	[ grep { $_->{body}{pipeline} ne 'main' || $_->{body}{kind} ne 'changes' } @$bodies ],
	[], 'every body says "pipeline":"main", "kind":"changes"');
is_deeply(
	[
		grep {
			my $t = $_;
			(grep { !exists $t->{$_} } qw(xid commit_lsn commit_time changes))
			  || (grep { !/^(xid|commit_lsn|commit_time|changes|messages)$/ } keys %$t)
			  || !@{ $t->{changes} }
		} @txns
	],
	[],
	'every transaction has xid, commit_lsn, commit_time and changes, nothing else');
is_deeply(
	[
		map { $_->{commit_time} }
		grep { $_->{commit_time} !~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$/ } @txns
	],
	[], 'every commit_time is an ISO 8601 UTC timestamp ending in Z');

my @disorder = grep { $txns[$_]{commit_lsn} <= $txns[ $_ - 1 ]{commit_lsn} } 1 .. $#txns;
is_deeply(\@disorder, [],
	'commit_lsn strictly increases across everything received (' . scalar(@txns) . ' transactions)');

# commit_time is the commit record's timestamp.
my $times = join(', ', map { "('$_->{xid}'::xid, '$_->{commit_time}'::timestamptz)" } @txns);
is( $node->safe_psql('postgres',
		"SELECT string_agg(x::text, ',') FROM (VALUES $times) v(x, t)"
		  . " WHERE pg_xact_commit_timestamp(x) IS DISTINCT FROM t"),
	'', 'commit_time equals pg_xact_commit_timestamp(xid) of every transaction');

SKIP:
{
	skip 'pg_walinspect is not available', 1 unless $have_walinspect;
	my %commit_record = map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres',
		"SELECT xid, start_lsn - '0/0' FROM pg_get_wal_records_info('$start_lsn', pg_current_wal_flush_lsn())"
		  . " WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'");
	is_deeply(
		[
			map  { "xid $_->{xid} commit_lsn $_->{commit_lsn}" }
			grep { ($commit_record{ $_->{xid} } // -1) != $_->{commit_lsn} } @txns
		],
		[],
		'commit_lsn is the LSN of the transaction\'s commit record');
}

# A multi-statement transaction arrives as one transaction, in statement order.
my @multi = grep {
	any { $_->{table} =~ /^t_multi_/ } @{ $_->{changes} }
} @txns;
is(scalar @multi, 1, 'a multi-statement transaction arrives as ONE transaction object');
is($multi[0]{xid}, $multi_xid, 'with its xid');
is_deeply(
	$multi[0]{changes},
	[
		{
			op => 'insert', schema => 'public', table => 't_multi_a',
			key => { id => 1 }, new => { id => 1, v => 'a1' }
		},
		{
			op => 'insert', schema => 'public', table => 't_multi_b',
			key => { id => 1 }, new => { id => 1, v => 'b1' }
		},
		{
			op => 'update', schema => 'public', table => 't_multi_a',
			key => { id => 1 }, new => { id => 1, v => 'a2' }, old => undef, unchanged => []
		},
		{
			op => 'delete', schema => 'public', table => 't_multi_b',
			key => { id => 1 }, old => { id => 1 }
		},
	],
	'its changes in statement order, without the rolled-back subtransaction or the unpublished table');
is_deeply([ grep { $_->{xid} == $rolled_back_xid } @txns ], [],
	'a rolled-back transaction never arrives');
is_deeply([ grep { $_->{xid} == $unpublished_xid } @txns ], [],
	'a transaction touching only unpublished tables never arrives');

# The checkpoint is the last delivered commit_lsn.
ok($node->poll_query_until('postgres',
		"SELECT checkpoint_lsn - '0/0' FROM replicant.status WHERE pipeline = 'main'",
		$txns[-1]{commit_lsn}),
	'replicant.status.checkpoint_lsn equals the last delivered commit_lsn');

# ---- headers ----------------------------------------------------------------

# The sink's arrival time of each batch, by its last commit_lsn.
my %arrival = map { $_->{commit_lsn} => $_->{arrival} }
  grep { $_->{pipeline} eq 'main' } @{ $sink->txlog };

# "webhook-id: name=value" of each body whose header fails the test, which is
# called with the header's value ('' when absent) and the body's last commit_lsn.
sub header_fails
{
	my ($name, $test) = @_;
	return [
		map { "$_->{webhook_id}: $name=" . ($_->{headers}{$name} // '(absent)') }
		grep { !$test->($_->{headers}{$name} // '', $_->{body}{transactions}[-1]{commit_lsn}) }
		  @$bodies
	];
}

cmp_ok(max(map { scalar @{ $_->{body}{transactions} } } @$bodies),
	'>=', 2, 'premise: a batch carried several transactions');
is_deeply(header_fails('webhook-id', sub { $_[0] eq "main-$_[1]" }),
	[], 'webhook-id is "<pipeline>-<commit_lsn of the batch\'s last transaction>"');
is_deeply(
	header_fails(
		'webhook-timestamp',
		sub { $_[0] =~ /^\d+$/ && abs($_[0] - ($arrival{ $_[1] } // 0)) < 60 }),
	[],
	'webhook-timestamp is Unix seconds within a minute of the batch\'s arrival');
is_deeply(header_fails('webhook-signature', sub { $_[0] =~ m{^v1,[A-Za-z0-9+/]{43}=$} }),
	[], 'webhook-signature is "v1,<base64 HMAC-SHA256>"');
my $stats = $sink->stats;
is($stats->{bad_signatures}, 0, 'the sink verified every signature');
is($stats->{requests}, $stats->{batches_applied}, 'the sink accepted every request');
is_deeply(header_fails('user-agent', sub { $_[0] =~ m{^replicant/} }),
	[], 'User-Agent is replicant/<version>');
is_deeply(header_fails('content-type', sub { $_[0] eq 'application/json' }),
	[], 'Content-Type is application/json');
is_deeply(header_fails('x-team', sub { $_[0] eq 'data' }),
	[], 'the configured header X-Team: data is sent');
is(scalar(@$bodies), scalar(@{ $stats->{accepted} }),
	'every accepted body was kept, across a sink restart');

# ---- publication membership -------------------------------------------------

%T = (schema => 'public', table => 't_ins');
changes_are($sink, 'public.t_ins',
	[
		{ op => 'insert', %T, key => { id => 1 }, new => { id => 1, v => 'a' } },
		{ op => 'insert', %T, key => { id => 2 }, new => { id => 2, v => 'c' } },
		{ op => 'insert', %T, key => { id => 3 }, new => { id => 3, v => 'd' } },
	],
	"publish = 'insert': only the inserts arrive, no update, delete or truncate");
changes_are($sink, 'public.t_late',
	[
		{
			op => 'insert', schema => 'public', table => 't_late',
			key => { id => 2 }, new => { id => 2, v => 'after the add' }
		}
	],
	'ALTER PUBLICATION ADD TABLE: changes after the add arrive, those before do not');
changes_are($sink, 'public.t_never',
	[], 'a table in no publication of the pipeline never arrives');

my %tables;
$tables{"$_->{schema}.$_->{table}"}++ foreach map { @{ $_->{changes} } } @txns;
is_deeply(
	[ sort keys %tables ],
	[
		sort qw(public.marker public.t_pk public.t_full_pk public.t_full_nokey public.t_uidx
		  public.t_toast public.t_multi_a public.t_multi_b public.t_batch public.t_late
		  public.t_ins public.t_noident)
	],
	'two publications deliver their union (FOR TABLE pub_tables + insert-only pub_ins), nothing else');

# FOR ALL TABLES: a table created later arrives; replicant's own tables never.
changes_are($sink_all, 'public.t_after',
	[
		{
			op => 'insert', schema => 'public', table => 't_after',
			key => { id => 1 }, new => { id => 1, v => 'created after the pipeline' }
		}
	],
	'FOR ALL TABLES delivers a table created after the pipeline');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM replicant.checkpoints'),
	'>=', 3, 'premise: replicant.checkpoints was written while the pipelines ran');
my @all_tables = map { "$_->{schema}.$_->{table}" }
  map { @{ $_->{changes} } } @{ transactions($sink_all) };
is_deeply([ grep { /^replicant\./ } @all_tables ], [],
	"FOR ALL TABLES never delivers replicant's own tables (pipelines, checkpoints)");
ok((any { $_ eq 'public.t_never' } @all_tables),
	'FOR ALL TABLES delivers a table outside the other publications');

# FOR TABLES IN SCHEMA: the schema's tables, including one created later.
changes_are($sink_schema, 's1.items',
	[
		{
			op => 'insert', schema => 's1', table => 'items',
			key => { id => 1 }, new => { id => 1, v => 'x' }
		}
	],
	'FOR TABLES IN SCHEMA delivers the schema\'s table');
changes_are($sink_schema, 's1.later',
	[
		{
			op => 'insert', schema => 's1', table => 'later',
			key => { id => 7 }, new => { id => 7 }
		}
	],
	'FOR TABLES IN SCHEMA delivers a table created in the schema later');
my %schema_tables;
$schema_tables{"$_->{schema}.$_->{table}"}++
  foreach map { @{ $_->{changes} } } @{ transactions($sink_schema) };
is_deeply([ sort keys %schema_tables ], [qw(s1.items s1.later s1.marker)],
	'FOR TABLES IN SCHEMA delivers nothing outside the schema');

# ---- latency ----------------------------------------------------------------

# Idle now: every sink has everything.  Each insert commits in an open
# session; the sink stamps the arrival of each request (txlog.arrival).
# Polling the sink runs its script, which takes a good part of a second
# here, so the latency is taken from that stamp, not from the poll.
my $psql = $node->background_psql('postgres');
my @latency_ms;
for my $i (1 .. 5)
{
	my $before_commit = time();
	my $xid = $psql->query_safe("INSERT INTO t_lat VALUES ($i) RETURNING pg_current_xact_id()::xid");
	my $arrived;
	while (!defined $arrived && time() < $before_commit + 10)
	{
		($arrived) = map { $_->{arrival} }
		  grep { $_->{pipeline} eq 'main' && $_->{xid} == $xid } @{ $sink->txlog };
		usleep(10_000) unless defined $arrived;
	}
	ok(defined $arrived, "single insert $i arrives within 10 s");
	next unless defined $arrived;
	push @latency_ms, ($arrived - $before_commit) * 1000;
	note(sprintf('single insert %d: %.1f ms from commit to sink', $i, $latency_ms[-1]));
}
$psql->quit;
my @sorted = sort { $a <=> $b } @latency_ms;
note(sprintf('single-insert commit-to-sink latency median: %.0f ms', $sorted[ $#sorted / 2 ]))
  if @sorted;

done_testing();
