# NATS JetStream destination with TLS and a user and password (issue #36
# item 2): the cluster serves clients over TLS only, with a self-signed
# certificate for 127.0.0.1, and takes one user.  Without ca_file the
# server is not trusted: the pipeline retries, its last_error fixed and
# value-free; with a wrong password the server refuses: the pipeline halts
# (a refusal is not transient, as an HTTP 401 is not), value-free; with
# ca_file and the credentials in the Authorization header, delivered.
# Headers other than Authorization halt the pipeline.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use IPC::Run;
use MIME::Base64;
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

Nats::require_server();
my ($openssl) = map { "$_/openssl" } grep { -x "$_/openssl" } split /:/, $ENV{PATH};
plan skip_all => 'openssl is not installed' unless $openssl;

my $dir = PostgreSQL::Test::Utils::tempdir('tls');
my ($out, $err) = ('', '');
IPC::Run::run(
	[
		$openssl, 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
		'-keyout', "$dir/key.pem", '-out', "$dir/cert.pem", '-days', '2',
		'-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'
	],
	'>', \$out, '2>', \$err)
  or die "openssl failed: $err";
chmod 0644, "$dir/cert.pem";

my $nats = Nats->start(
	conf => "tls { cert_file: \"$dir/cert.pem\", key_file: \"$dir/key.pem\" }\n"
	  . "authorization { users: [ { user: rep, password: \"s3cret-pw\" } ] }",
	tool_env => { NATS_CA => "$dir/cert.pem", NATS_USER => 'rep', NATS_PASSWORD => 's3cret-pw' });
$nats->create_stream('S', 'replicant.p.>');

my $node = ReplicantTest::new_node('nats_tls');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
sub poll { return ReplicantTest::poll($node, @_); }
sub status
{
	return $node->safe_psql('postgres', "SELECT state || ': ' || coalesce(last_error, '') FROM replicant.status WHERE pipeline = 'p'");
}

my $basic = encode_base64('rep:s3cret-pw', '');
my $wrong = encode_base64('rep:wrong-pw', '');
my $url = $nats->url('S', 'tls=true');

# TLS, the server not trusted
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$url', headers => '{\"Authorization\": \"Basic $basic\"}')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'a')");
ok(poll("SELECT state = 'retrying' AND last_error LIKE 'sink unavailable: could not connect to NATS%' FROM replicant.status WHERE pipeline = 'p'", 60),
	'an untrusted certificate: retrying') or diag(status());
unlike(status(), qr/s3cret|127\.0\.0\.1/, 'last_error quotes neither credentials nor servers');

# trusted, the wrong password
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('p', ca_file => '$dir/cert.pem', headers => '{\"Authorization\": \"Basic $wrong\"}')");
ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'", 60),
	'a wrong password: halted') or diag(status());
like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'p'"),
	qr/NATS refused the pipeline's credentials/, 'a wrong password: the halt says why');
unlike(status() . $node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'p'"),
	qr/wrong-pw/, 'last_error and halt_reason quote no credentials');

# trusted, the right credentials
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('p', headers => '{\"Authorization\": \"Basic $basic\"}')");
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('p')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'b')");
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'TLS and a password: delivered')
  or diag(status());
my @msgs = $nats->messages('S');
is_deeply(Nats::table_state(\@msgs, 'public', 't'), Nats::source_state($node, 'postgres', 't', ['id']),
	't in the stream equals the source');

# tls:// is the same
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('p', sink_url => '" . ($url =~ s{^nats://}{tls://}r =~ s/\?tls=true$//r) . "')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (3, 'c')");
ok(poll("SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 1000)", 120), 'tls://: delivered')
  or diag(status());

# a header that is not Authorization halts, value-free
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('p', headers => '{\"X-Other\": \"hidden-value\"}')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (4, 'd')");
ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'p'", 60), 'another header halts');
like($node->safe_psql('postgres', "SELECT halt_reason FROM replicant.pipelines WHERE name = 'p'"),
	qr/NATS sinks take no header but Authorization/, 'the halt says why');
unlike(status(), qr/hidden-value/, 'and quotes no value');
done_testing();
