# What a backfill chunk may drop inside its window: only the rows the stream
# changed.  A key-less table's chunk must not be dropped because some other
# row was inserted meanwhile (every row's key is null), and an UPDATE that
# leaves a TOASTed column unchanged must not leave the sink without it.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('chunk_drops');

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE keyless (a bigint, b text);
	INSERT INTO keyless SELECT g, 'row ' || g FROM generate_series(1, 20000) g;
	CREATE SEQUENCE keyless_seq START 1000000;
	CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, doc text NOT NULL);
	ALTER TABLE docs ALTER COLUMN doc SET STORAGE EXTERNAL;
	INSERT INTO docs SELECT g, 0, repeat(md5(g::text), 100) FROM generate_series(1, 4000) g;
	CREATE TABLE docs_rnd (LIKE docs INCLUDING ALL);
	INSERT INTO docs_rnd SELECT * FROM docs ORDER BY random();
	ANALYZE;
	CREATE PUBLICATION keyless_pub FOR TABLE keyless WITH (publish = 'insert');
	CREATE PUBLICATION docs_pub FOR TABLE docs, docs_rnd;
});

# Two pgbench clients running $sql for up to $seconds, at most $rate
# transactions a second when given: what they leave to deliver must not grow
# with the machine's speed past what the reference sink applies in a wait.
sub client
{
	my ($sql, $seconds, $rate) = @_;
	my $script = PostgreSQL::Test::Utils::tempdir() . '/client.sql';
	PostgreSQL::Test::Utils::append_to_file($script, $sql);
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', '2', '-T', $seconds, ($rate ? ('-R', $rate) : ()), '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

sub backfill_done
{
	my ($id) = @_;
	ReplicantTest::poll($node,
		"SELECT b.state = 'done' OR s.state = 'halted' FROM replicant.backfill_status b"
		  . " JOIN replicant.status s USING (pipeline) WHERE b.id = $id", 120);
	return $node->safe_psql('postgres',
		"SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id") eq 't';
}

# ---- key-less: inserts of other rows inside a window ----------------------
{
	my $sink = ReplicantTest::start_sink(name => 'keyless');
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('kl', 'keyless_pub', '$sink->{url}')");
	$node->poll_query_until('postgres',
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'kl'");
	my $inserts = client(
		"INSERT INTO keyless VALUES (nextval('keyless_seq'), 'inserted');\n", 60, 2000);
	$node->poll_query_until('postgres', "SELECT count(*) > 0 FROM keyless WHERE b = 'inserted'");
	my $id = $node->safe_psql('postgres', "SELECT replicant.backfill('kl', 'keyless')");
	ok(backfill_done($id), 'key-less backfill finishes under concurrent inserts');
	$inserts->kill_kill;
	$node->poll_query_until('postgres', q{SELECT NOT EXISTS (
		SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgbench')});
	is($node->safe_psql('postgres', "SELECT replicant.await_delivered('kl')"), 't',
		'every insert was delivered');

	# Duplicates are allowed for a table without a key; loss is not.
	my %sunk = map { $_ => 1 } split /\n/, $sink->dump('public.keyless');
	my @source = split /\n/, ReplicantTest::source_rows($node, 'postgres', 'keyless');
	my @missing = grep { !$sunk{$_} } @source;
	is(scalar(@missing), 0,
		'keyless_chunk_dropped_by_other_insert: every source row reached the sink'
		  . ' (' . scalar(@missing) . ' of ' . scalar(@source) . ' missing)');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('kl')");
	$sink->stop;
}

# ---- unchanged TOAST: an UPDATE of another column inside a window ----------
# Block windows would miss a row that an update moves into a block already
# read, and the update leaves the sink without the TOASTed column: auto
# reads such a table by key even when the key is not in heap order
# (docs_rnd), and an explicit ctid warns.
for my $case (['keyset', 'docs'], ['auto', 'docs_rnd'])
{
	my ($mode, $table) = @$case;
	my $sink = ReplicantTest::start_sink(name => "toast_$mode");
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('toast_$mode', 'docs_pub', '$sink->{url}')");
	$node->poll_query_until('postgres',
		"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'toast_$mode'");
	# Every chunk waits two seconds between its snapshot and its read
	# (backfill_window:pause): updates land in every window at any
	# machine's speed, at a rate the sink keeps up with.
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET replicant.fault_point = 'backfill_window:pause'; SELECT pg_reload_conf();");
	my $updates = client(
		"\\set id random(1, 4000)\nUPDATE $table SET n = n + 1 WHERE id = :id;\n", 120, 1000);
	my $id = $node->safe_psql('postgres',
		"SELECT replicant.backfill('toast_$mode', '$table', mode => '$mode')");
	is($node->safe_psql('postgres', "SELECT mode FROM replicant.backfill_status WHERE id = $id"),
		'keyset', "$mode: $table is read by key");
	ok(backfill_done($id), "$mode: backfill of $table finishes under updates");
	$updates->kill_kill;
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();');
	like(slurp_file($node->logfile, $log_offset), qr/fault point "backfill_window" reached, pausing/,
		"$mode: the chunks paused with updates running");
	$node->poll_query_until('postgres', q{SELECT NOT EXISTS (
		SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgbench')});

	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, [$table], 180),
		"unchanged_toast_wiped_in_window ($mode): the sink ends with every full row");
	my $partial = grep { !/"doc":/ } split /\n/, $sink->dump("public.$table");
	is($partial, 0, "$mode: no row at the sink lacks its TOASTed column");
	if ($mode eq 'auto')
	{
		my ($ret, $out, $err) = $node->psql('postgres',
			"SELECT replicant.backfill('toast_auto', 'docs', mode => 'ctid')");
		is($ret, 0, 'an explicit ctid backfill of docs is planned');
		like($err, qr/WARNING:  mode "ctid" can deliver rows of table "docs" without their TOASTed columns/,
			'with a warning that it can lose TOASTed columns');
	}
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('toast_$mode')");
	$sink->stop;
}

done_testing();
