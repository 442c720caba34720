# A worker that starts while ALTER EXTENSION replicant UPDATE is under way
# reads its pipeline as the update left it.
#
# From 0.2.0 the update adds replicant.pipelines.event_id_key, the key of
# CloudEvents read ids.  A worker that decided which columns to read before
# waiting for the update's lock read the old column list once the update
# committed, and keyed that run's read ids with a random key of its own: the
# same row, read again by a later worker, got another id, and a consumer
# that de-duplicates by id applied it twice.  Here a worker is restarted
# while the update is uncommitted, waits for its lock, and then delivers a
# backfill; a later worker delivers a second one: each row's digest is the
# same in both.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;
use JSON::PP;
use MIME::Base64;

my $node = ReplicantTest::new_node('update_start');
my $sink = ReplicantTest::start_sink(keep_bodies => 1, name => 'rk');
my $db   = 'from_020';

$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, qq{
CREATE EXTENSION replicant VERSION '0.2.0';
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 20) g;
CREATE PUBLICATION pub FOR TABLE t;
SELECT replicant.create_pipeline('rk', 'pub', '$sink->{url}', format => 'cloudevents');
});
my $poll = sub { return ReplicantTest::poll($node, $_[0], $_[1], $db); };
ok($poll->("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rk'"),
	'the pipeline streams under 0.2.0');

my $worker_pid = sub {
	return $node->safe_psql($db,
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"
		  . " AND datname = '$db'");
};
my $old_pid = $worker_pid->();
ok($old_pid =~ /^\d+$/, 'the worker runs');

# The update, uncommitted; a worker starts meanwhile and waits for its lock.
my $update = $node->background_psql($db);
$update->query_safe('BEGIN');
$update->query_safe('ALTER EXTENSION replicant UPDATE');
$node->safe_psql($db, "SELECT pg_terminate_backend($old_pid)");
my $waiting = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"
  . " AND datname = '$db' AND pid <> $old_pid AND wait_event_type = 'Lock'";
ok($poll->("SELECT count(*) = 1 FROM ($waiting) w"), 'a new worker waits for the update');
my $new_pid = $node->safe_psql($db, $waiting);
$update->query_safe('COMMIT');
$update->quit;
ok($poll->("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rk'"),
	'the pipeline streams after the update');
# Not another one: that worker took the rewritten table for a dropped
# pipeline, and the launcher started the next only when a sync saw it.
is($worker_pid->(), $new_pid, 'the worker that waited for the update streams');

# The digests of a backfill's read ids, by row.
sub backfill_digests
{
	my ($label) = @_;
	my $id = $node->safe_psql($db, "SELECT replicant.backfill('rk', 't')");
	ok($poll->("SELECT state = 'done' FROM replicant.backfill_status WHERE id = $id"),
		"$label: the backfill is delivered");
	my %digest;
	foreach my $request (@{ $sink->raw_bodies })
	{
		foreach my $e (@{ decode_json(decode_base64($request->{body_base64})) })
		{
			next unless $e->{type} eq 'io.replicant.read' && ($e->{backfillid} // "") eq $id;
			$digest{ $e->{data}{new}{id} } = ($e->{id} =~ /^rk-b\d+-([0-9a-f]+)$/)[0];
		}
	}
	is(scalar(keys %digest), 20, "$label: every row was read");
	return \%digest;
}

my $first = backfill_digests('the worker started during the update');
$node->safe_psql($db,
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'replicant pipeline'"
	  . " AND datname = '$db'");
ok($poll->("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rk'"),
	'a later worker streams');
my $second = backfill_digests('a later worker');
is_deeply($second, $first, "a row's read id is the same when a later worker reads it again");

done_testing();
