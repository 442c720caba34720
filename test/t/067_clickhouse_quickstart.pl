# README's ClickHouse quick start, run as it is written there: its shell
# blocks (test/clickhouse/run-local.sh to start and stop a throwaway server,
# clickhouse-client to look) and its SQL block, with nothing changed but the
# port (a free one instead of 8123, and 8124 after it), the directory and
# "sudo" (the test runs as the user that runs the server).  And the
# reference sink's --help, which README's first example points to.
use strict;
use warnings;
use Cwd qw(abs_path);
use FindBin;
use lib "$FindBin::RealBin/..";
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ClickHouse;
use ReplicantTest;

ClickHouse::require_server();

my $repo = abs_path("$FindBin::RealBin/../..");
my $readme = slurp_file("$repo/README.md");
my ($section) = $readme =~ /^#### ClickHouse quick start\n(.*?)^#### /ms;
ok(defined $section, 'README has a ClickHouse quick start');
my @blocks = $section =~ /^```(\w+)\n(.*?)^```$/msg;
my %block;
while (my ($lang, $text) = splice(@blocks, 0, 2))
{
	push @{ $block{$lang} }, $text;
}
is(scalar(@{ $block{sh} // [] }), 2, 'two shell blocks: start, then look and stop');
ok(scalar(@{ $block{sql} // [] }) >= 1, 'an SQL block');

# run-local.sh takes PORT + 1 too: a free port whose next one is free.
sub port_free
{
	my ($p) = @_;
	my $socket = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $p,
		Proto => 'tcp', ReuseAddr => 1);
	return 0 unless $socket;
	close($socket);
	return 1;
}
my $port = PostgreSQL::Test::Cluster::get_free_port();
$port = PostgreSQL::Test::Cluster::get_free_port() until port_free($port + 1);
my $dir = PostgreSQL::Test::Utils::tempdir('quickstart') . '/clickhouse';
my $started;

# A README shell line as this test runs it.
sub adapted
{
	my ($line) = @_;
	$line =~ s/^sudo //;
	$line =~ s/&& sudo /&& /g;
	$line =~ s/\b8124\b/$port + 1/ge;
	$line =~ s/\b8123\b/$port/g;
	$line =~ s{/tmp/clickhouse\b}{$dir}g;
	return $line;
}

# Runs the lines of a shell block (a trailing backslash continues a line),
# but those matching $skip.
sub run_block
{
	my ($text, $skip) = @_;
	my $out = '';
	(my $joined = $text) =~ s/\\\n\s*/ /g;
	foreach my $line (split /\n/, $joined)
	{
		next if $line =~ /^\s*(#|$)/;
		next if $line =~ /apt-get install/;    # .ci/run installs the packages
		next if defined $skip && $line =~ $skip;
		my $cmd = adapted($line);
		my ($stdout, $stderr) = ('', '');
		my $ok = IPC::Run::run([ 'bash', '-c', $cmd ], '<', \'', '>', \$stdout, '2>', \$stderr);
		$started = 1 if $cmd =~ /run-local\.sh \d+/;
		$started = 0 if $cmd =~ /run-local\.sh stop/;
		ok($ok, "runs: $cmd") or diag("stdout: $stdout\nstderr: $stderr");
		$out .= $stdout;
	}
	return $out;
}

my $node = ReplicantTest::new_node('quickstart');

chdir $repo or die "cannot enter $repo: $!";
my $start = run_block($block{sh}[0]);
like($start, qr/clickhouse-server \S+ is running/, 'run-local.sh starts the server');
like($start, qr{HTTP \(sink_url\):\s+http://127\.0\.0\.1:$port/\?database=replica}, '... and says where');

(my $sql = $block{sql}[0]) =~ s/\b8123\b/$port/g;
my ($ret, $stdout, $stderr) = $node->psql('postgres', $sql, on_error_stop => 1);
is($ret, 0, 'the SQL block runs as written') or diag($stderr);
like($stdout, qr/^t$/m, '... await_delivered returns true');
like($stdout, qr/^customers_ch\|streaming\|$/m, '... the pipeline streams, without an error');

if (!system('sh', '-c', 'command -v clickhouse-client >/dev/null 2>&1'))
{
	my $looked = run_block($block{sh}[1]);
	like($looked, qr/\A999\t1\n/, 'ClickHouse holds what README says it prints');
}
else
{
	# test/pg-matrix.sh lends its chroots the server only: ask over HTTP.
	my ($query) = $block{sh}[1] =~ /--query \\\n\s*'([^']+)'/;
	my $r = HTTP::Tiny->new(timeout => 60)->post("http://127.0.0.1:$port/",
		{ content => $query,
		  headers => { 'X-ClickHouse-User' => 'writer', 'X-ClickHouse-Key' => 'writer-password' } });
	is($r->{content}, "999\t1\n", 'ClickHouse holds what README says it prints (over HTTP)');
	run_block($block{sh}[1], qr/clickhouse-client/);
}
ok(!$started, 'run-local.sh stop stopped it');
ok(!-d $dir, '... and the directory is gone');

# The reference sink README starts first: its top-level help is short and
# says where serve's options are.
my $help = ReplicantTest::run_sink_script(['--help']);
cmp_ok(scalar(split /\n/, $help), '<', 30, 'sink_help_short: replicant_sink.py --help fits a screen');
like($help, qr/serve --help/, '... and points to serve --help');
unlike($help, qr/--fail-status/, '... without the fault flags');

END
{
	# A failed run leaves no server behind.
	system('bash', "$repo/test/clickhouse/run-local.sh", 'stop', $dir) if $started && $dir;
}

done_testing();
