# replicant's signatures, checked on real requests by the official Standard
# Webhooks library (npm standardwebhooks, through test/js/verify.mjs): with a
# "whsec_" secret, with a raw one, and with both secrets during a rotation.
# Then README's receiver, run as written there, takes replicant's requests
# and refuses ones signed with another secret.
#
# The reference sink runs without a secret here: it keeps every request as
# received, and the library is the only judge of the signatures.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use MIME::Base64;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ReplicantTest;

ReplicantTest::require_node('standardwebhooks');

my $node = ReplicantTest::new_node('webhooks');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});

my $next_id = 0;

# Inserts a row and waits until every pipeline in @pipelines delivered it.
sub deliver
{
	my (@pipelines) = @_;
	$next_id++;
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($next_id, 'row $next_id')");
	foreach my $p (@pipelines)
	{
		is($node->safe_psql('postgres',
				"SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 60000)"),
			't', "row $next_id delivered by $p");
	}
	return;
}

# The library's verdict on each request: "ok <id>" or "failed <id>: why".
sub verdicts
{
	my ($requests, $secret, $form) = @_;
	my $stdin = join('', map { encode_json($_) . "\n" } @$requests);
	my $out = ReplicantTest::run_node('verify.mjs', [ $secret, $form // () ], $stdin);
	return [ split /\n/, $out ];
}

# Checks that the library verifies all of @$requests (or none) with $secret.
sub verifies
{
	my ($requests, $secret, $form, $expect_ok, $label) = @_;
	my $got = verdicts($requests, $secret, $form);
	my @wrong = grep { $expect_ok ? !/^ok / : !/^failed .*: No matching signature found$/ } @$got;
	ok(@$got == @$requests && @$requests > 0 && !@wrong,
		"$label (" . scalar(@$requests) . ' requests)')
	  or diag(join("\n", @wrong));
	return;
}

sub signatures { return split ' ', $_[0]{headers}{'webhook-signature'} // ''; }

# ---- 1. a "whsec_" secret, as replicant.generate_secret() makes them --------
my $secret = $node->safe_psql('postgres', 'SELECT replicant.generate_secret()');
my $other  = $node->safe_psql('postgres', 'SELECT replicant.generate_secret()');
my $sink   = ReplicantTest::start_sink(keep_bodies => 1);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('b64', 'pub', '$sink->{url}', secret => '$secret')");
deliver('b64');
deliver('b64');
my $before = $sink->raw_bodies;
verifies($before, $secret, undef, 1, 'whsec_ secret: the library verifies every request');
verifies($before, $other, undef, 0, 'and another secret verifies none');
is(scalar(grep { signatures($_) == 1 } @$before), scalar(@$before),
	'each request carries one signature');

my %tampered = %{ $before->[-1] };
(my $body = decode_base64($tampered{body_base64})) =~ s/row /rOw /;
$tampered{body_base64} = encode_base64($body, '');
verifies([ \%tampered ], $secret, undef, 0, 'a changed body does not verify');

# ---- 2. a raw secret: its own UTF-8 bytes are the key --------------------------
my $raw      = "not base64, with a space and an \xc3\xa9";
my $raw_sink = ReplicantTest::start_sink(keep_bodies => 1, name => 'raw');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('raw', 'pub', '$raw_sink->{url}', secret => '$raw')");
deliver('raw');
verifies($raw_sink->raw_bodies, $raw, 'raw', 1,
	'raw secret: the library verifies every request with { format: "raw" }');

# ---- 3. rotation: both signatures, each verified by its own secret -------------
my $new = $node->safe_psql('postgres', 'SELECT replicant.generate_secret()');
$node->safe_psql('postgres',
	"SELECT replicant.alter_pipeline('b64', secret => '$new',"
	  . " secret_previous_until => now() + interval '1 hour')");
deliver('b64');
my $all = $sink->raw_bodies;
my @rotated = grep { signatures($_) == 2 } @$all[ scalar(@$before) .. $#$all ];
is(scalar(signatures($all->[-1])), 2,
	'after the rotation webhook-signature carries two signatures');
verifies(\@rotated, $secret, undef, 1, 'rotation: the previous secret verifies them');
verifies(\@rotated, $new, undef, 1, 'rotation: the new secret verifies them too');
verifies($before, $new, undef, 0, 'the new secret verifies none from before the rotation');

# ---- 4. README's receiver, as written there ------------------------------------
my $readme = slurp_file("$FindBin::RealBin/../../README.md");
my ($receiver) = $readme =~ /A receiver in Node\.js.*?^```js\n(.*?)^```$/ms;
ok(defined $receiver, "README's receiver found");
my $dir = PostgreSQL::Test::Utils::tempdir('receiver');
PostgreSQL::Test::Utils::append_to_file("$dir/receiver.mjs", $receiver // '');
# the script imports "standardwebhooks" as an installed package
symlink("$ReplicantTest::JS_DIR/node_modules", "$dir/node_modules")
  or die "could not link node_modules: $!";

my $port = PostgreSQL::Test::Cluster::get_free_port();
my ($out, $err) = ('', '');
my $handle = do {
	local $ENV{SECRET} = $secret;
	local $ENV{PORT}   = $port;
	IPC::Run::start([ $ReplicantTest::NODE, "$dir/receiver.mjs" ],
		'<', '/dev/null', '>', \$out, '2>', \$err);
};
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
until (IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp'))
{
	die "README's receiver exited: $err" unless $handle->pumpable;
	die "README's receiver did not listen on port $port" if time() > $deadline;
	usleep(50_000);
}
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('readme', 'pub', 'http://127.0.0.1:$port/', secret => '$secret')");
deliver('readme');

$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('forged', 'pub', 'http://127.0.0.1:$port/', secret => '$other')");
$node->safe_psql('postgres', "INSERT INTO t VALUES (-1, 'refused')");
ok(ReplicantTest::poll($node,
		"SELECT state = 'halted' AND last_error LIKE '%HTTP 401%'
		   FROM replicant.status WHERE pipeline = 'forged'"),
	"it answers 401 to another secret's requests (and 4xx halts the pipeline)");
$handle->kill_kill(grace => 5);

done_testing();

# The receiver must not outlive a test that died half-way.
END
{
	local $?;
	$handle->kill_kill(grace => 5) if $handle && $handle->pumpable;
}
