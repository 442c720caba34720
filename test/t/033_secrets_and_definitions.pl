# replicant.generate_secret() makes secrets Standard Webhooks verifiers take
# (also across the README's rotation example), and
# replicant.pipeline_definitions() recreates pipelines, as after pg_restore.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('definitions');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY);
	CREATE PUBLICATION pub FOR TABLE t;
});

my $secret = $node->safe_psql('postgres', 'SELECT replicant.generate_secret()');
like($secret, qr{^whsec_[A-Za-z0-9+/]{32}$}, 'a secret is whsec_ and the base64 of 24 bytes');
isnt($node->safe_psql('postgres', 'SELECT replicant.generate_secret()'), $secret,
	'every call makes a new one');

my $sink = ReplicantTest::start_sink(secret => $secret);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('signed', 'pub', '$sink->{url}', secret => '$secret')");
$node->safe_psql('postgres', 'INSERT INTO t VALUES (1)');
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('signed', pg_current_wal_lsn(), 60000)"),
	't', 'delivered with a generated secret');
is($sink->stats->{bad_signatures}, 0, 'the sink verified every signature');

# The README's rotation example, as pasted: the old secret stays valid.
$node->safe_psql('postgres', q{
	SELECT replicant.alter_pipeline('signed', secret => replicant.generate_secret(),
	                                secret_previous_until => now() + interval '1 day');
});
$node->safe_psql('postgres', 'INSERT INTO t VALUES (2)');
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('signed', pg_current_wal_lsn(), 60000)"),
	't', 'delivered after rotating to a generated secret');
is($sink->stats->{bad_signatures}, 0, 'a sink still on the old secret verifies them');

# The sink moves to the new secret, as the rotation allows.
$sink->restart(secret => $node->safe_psql('postgres',
	"SELECT d.secret FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id"
	  . " WHERE p.name = 'signed'"));

# pipeline_definitions: secrets and header values only when asked for.
my $plain = ReplicantTest::start_sink(name => 'plain');
$node->safe_psql('postgres', qq{
	SELECT replicant.create_pipeline('other', ARRAY['pub'], '$plain->{url}',
	       batch_max_transactions => 77, headers => '{"X-Token": "tok-123"}',
	       messages => true, message_prefixes => ARRAY['outbox', 'it''s'],
	       max_retained_wal => '2GB', destination => 'archive');
	SELECT replicant.disable_pipeline('other');
});
my $without = $node->safe_psql('postgres', 'SELECT * FROM replicant.pipeline_definitions()');
unlike($without, qr/\Q$secret\E|tok-123|whsec_/, 'by default no secret and no header value is shown');
like($without, qr/-- left out: secret$/m, 'and the definition says what was left out');
like($without, qr/-- left out: headers "X-Token"$/m, '... header names included');
my $with = $node->safe_psql('postgres', 'SELECT * FROM replicant.pipeline_definitions(include_secrets => true)');
like($with, qr/tok-123/, 'include_secrets shows them');
like($with, qr/'other'.*, max_retained_wal => '2048MB', destination => 'archive'\);/,
	'and the WAL budget, and the destination\'s name');
unlike($with, qr/'signed'.*destination =>/, 'a destination named "default" goes unnamed');

my $catalog = q{SELECT p.name, d.name, publications, sink_url, snapshot, enabled, batch_max_bytes,
	batch_max_transactions, http_timeout_ms, connect_timeout_ms, headers, secret,
	snapshot_workers, messages, message_prefixes, ca_file, max_retained_wal
	FROM replicant.pipelines p JOIN replicant.destinations d ON d.pipeline_id = p.id ORDER BY p.name};
my $before = $node->safe_psql('postgres', $catalog);

# What pg_dump + pg_restore leave: the extension, no pipelines, no slots.
$node->safe_psql('postgres', $_) for (
	"SELECT replicant.drop_pipeline('signed')",
	"SELECT replicant.drop_pipeline('other')");
is($node->safe_psql('postgres', 'SELECT count(*) FROM replicant.pipelines'), '0', 'pipelines dropped');
foreach my $call (split /\n/, $with)
{
	my ($ret, $out, $err) = $node->psql('postgres', $call);
	is($ret, 0, 'a definition runs as returned') or diag("$call\n$err");
}
is($node->safe_psql('postgres', $catalog), $before, 'the pipelines are recreated with the same configuration');
is($node->safe_psql('postgres', 'SELECT * FROM replicant.pipeline_definitions(true)'), $with,
	'and give the same definitions');

$node->safe_psql('postgres', 'INSERT INTO t VALUES (3)');
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('signed', pg_current_wal_lsn(), 60000)"),
	't', 'the recreated pipeline delivers');
ok(grep({ $_->{nchanges} == 1 } @{ $sink->txlog }) >= 3, 'the sink got the change');
is($sink->stats->{bad_signatures}, 0, 'signed with the restored secret');

$node->stop;
$sink->stop;
$plain->stop;
done_testing();
