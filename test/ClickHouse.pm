=pod

=head1 NAME

ClickHouse - a private ClickHouse server for one TAP test

=head1 SYNOPSIS

  use ClickHouse;

  ClickHouse::require_server();
  my $ch = ClickHouse->start;
  $ch->query_ok('CREATE TABLE t (id Int64, _version UInt64)
                 ENGINE = ReplacingMergeTree(_version) ORDER BY id');
  $ch->query_ok('INSERT INTO t FORMAT JSONEachRow', data => qq{{"id":1,"_version":7}\n});
  my $rows = $ch->select_rows('SELECT * FROM t FINAL ORDER BY id');
  $ch->stop(signal => 'KILL');    # a crash; restart() brings it back
  $ch->restart;

=head1 DESCRIPTION

start() runs clickhouse-server as the user running the tests, on loopback
and two free ports, with test/clickhouse/config.xml and users.xml and its data
in a temporary directory; everything goes over the HTTP interface. The
server's log is tmp_check/log/<test>_clickhouse.log (errors also in
<test>_clickhouse.err.log, what it prints in <test>_clickhouse.stdout.log).
Servers still running when the test ends are stopped.

Written for Debian 12's clickhouse-server 18.16 (what .ci/run installs) and
current servers alike.

=cut

package ClickHouse;

use strict;
use warnings FATAL => 'all';

use Cwd qw(abs_path);
use File::Basename qw(basename dirname);
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our $CONFIG_DIR = dirname(abs_path(__FILE__)) . '/clickhouse';

my @running;    # servers to stop when the test script ends

=pod

=head1 FUNCTIONS

=over

=item server_binary()

The clickhouse-server to run: C<$ENV{CLICKHOUSE_SERVER}>, else the first of
clickhouse-server in /usr/sbin (Debian's package), /usr/bin (current
packages) and PATH. undef if there is none.

=cut

sub server_binary
{
	return $ENV{CLICKHOUSE_SERVER} if $ENV{CLICKHOUSE_SERVER};
	foreach my $dir ('/usr/sbin', '/usr/bin', split(/:/, $ENV{PATH} // ''))
	{
		return "$dir/clickhouse-server" if -x "$dir/clickhouse-server";
	}
	return undef;
}

=pod

=item require_server()

Skips the test when there is no clickhouse-server, with the reason; under
CI=true (where .ci/run installs it) that is a failure instead, unless
C<REPLICANT_NO_CLICKHOUSE> says why this system cannot have one
(test/pg-matrix.sh sets it: Debian 13 and later have no package).

=cut

sub require_server
{
	return if defined server_binary();
	my $why = 'clickhouse-server is not installed';
	if (my $reason = $ENV{REPLICANT_NO_CLICKHOUSE})
	{
		plan skip_all => "$why: $reason";
	}
	die "$why, and CI=true needs it (apt-get install clickhouse-server)\n"
	  if $ENV{CI};
	plan skip_all => "$why (apt-get install clickhouse-server; CI=true fails instead)";
}

=pod

=item ClickHouse->start(%opts)

Starts a server and waits until it answers; returns the server object.
Option C<name> names its log files (default "clickhouse").

=cut

sub start
{
	my ($class, %opts) = @_;
	my $name = $opts{name} // 'clickhouse';
	my $test = basename($0);
	$test =~ s/\.[^.]+$//;
	my $self = bless {
		name      => $name,
		dir       => PostgreSQL::Test::Utils::tempdir($name),
		http_port => PostgreSQL::Test::Cluster::get_free_port(),
		tcp_port  => PostgreSQL::Test::Cluster::get_free_port(),
		log       => "$PostgreSQL::Test::Utils::log_path/${test}_$name.log",
		http      => HTTP::Tiny->new(timeout => 60, keep_alive => 0),
	}, $class;
	$self->{url} = "http://127.0.0.1:$self->{http_port}/";
	(my $errorlog = $self->{log}) =~ s/\.log$/.err.log/;
	# what it prints before its log is open (a bad config) goes here
	($self->{stdout} = $self->{log}) =~ s/\.log$/.stdout.log/;

	my $config = slurp_file("$CONFIG_DIR/config.xml");
	$config =~ s/\@DIR\@/$self->{dir}/g;
	$config =~ s/\@LOG\@/$self->{log}/g;
	$config =~ s/\@ERRORLOG\@/$errorlog/g;
	$config =~ s/\@HTTP_PORT\@/$self->{http_port}/g;
	$config =~ s/\@TCP_PORT\@/$self->{tcp_port}/g;
	PostgreSQL::Test::Utils::append_to_file("$self->{dir}/config.xml", $config);
	PostgreSQL::Test::Utils::append_to_file("$self->{dir}/users.xml",
		slurp_file("$CONFIG_DIR/users.xml"));

	$self->_launch;
	return $self;
}

sub _launch
{
	my ($self) = @_;
	my $binary = server_binary() // die "clickhouse-server is not installed";
	$self->{handle} = IPC::Run::start(
		[ $binary, "--config-file=$self->{dir}/config.xml" ],
		'<', '/dev/null', '>>', $self->{stdout}, '2>>', $self->{stdout});
	push @running, $self unless grep { $_ == $self } @running;

	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ($self->up)
	{
		die "clickhouse-server exited at start, see $self->{stdout} and $self->{log}"
		  unless $self->{handle}->pumpable;
		die "clickhouse-server did not answer on port $self->{http_port}, see $self->{log}"
		  if time() > $deadline;
		usleep(100_000);
	}
	chomp($self->{version} = $self->query_ok('SELECT version()'));
	note("clickhouse-server $self->{version} on port $self->{http_port}");
	return;
}

=pod

=back

=head1 METHODS

Fields: C<url> (C<http://127.0.0.1:PORT/>, the HTTP interface), C<http_port>,
C<tcp_port> (for clickhouse-client), C<version>, C<dir>, C<log>.

=over

=item $ch->up

True if the server answers a query now.

=cut

sub up
{
	my ($self) = @_;
	my $r = $self->{http}->get($self->{url} . '?query=SELECT%201');
	return $r->{success} && $r->{content} eq "1\n";
}

=pod

=item $ch->query($sql, %opts)

Sends one query over HTTP; returns HTTP::Tiny's response (C<status>,
C<content>, C<headers>; status 599: no connection). Without C<data> the query
is the POST body. With C<data> (e.g. JSONEachRow lines for C<INSERT ... FORMAT
JSONEachRow>) the query goes in the URL and the data is the body, as a sink
client sends it. C<settings> (a hash) become URL parameters, as do the
C<X-ClickHouse-*> C<headers> (a hash) as headers.

=cut

sub query
{
	my ($self, $sql, %opts) = @_;
	my %params = %{ $opts{settings} // {} };
	$params{query} = $sql if defined $opts{data};
	my $url = $self->{url};
	$url .= '?' . $self->{http}->www_form_urlencode(\%params) if %params;
	return $self->{http}->post($url,
		{ content => $opts{data} // $sql, headers => $opts{headers} // {} });
}

=pod

=item $ch->query_ok($sql, %opts)

As query(), but dies unless the answer is 2xx; returns the response body.

=cut

sub query_ok
{
	my ($self, $sql, %opts) = @_;
	my $r = $self->query($sql, %opts);
	die "ClickHouse answered $r->{status} to $sql: $r->{content}" unless $r->{success};
	return $r->{content};
}

=pod

=item $ch->select_rows($sql, %opts)

Runs a SELECT with C<FORMAT JSONEachRow> appended; returns its rows as an
array of hashes. 64-bit integers are JSON numbers (the setting
C<output_format_json_quote_64bit_integers=0>; by default they come quoted).

=cut

sub select_rows
{
	my ($self, $sql, %opts) = @_;
	my %settings = (output_format_json_quote_64bit_integers => 0,
		%{ $opts{settings} // {} });
	my $out = $self->query_ok("$sql FORMAT JSONEachRow", %opts, settings => \%settings);
	return [ map { decode_json($_) } grep { /\S/ } split /\n/, $out ];
}

=pod

=item error_code($response)

The ClickHouse error code of a failed answer: the C<X-ClickHouse-Exception-Code>
header (current servers), else the C<Code: N> the body starts with (18.16
sends no such header). undef when there is neither.

=cut

sub error_code
{
	my ($r) = @_;
	my $header = $r->{headers}{'x-clickhouse-exception-code'};
	return $header + 0 if defined $header && $header =~ /^\d+$/;
	return $1 + 0 if ($r->{content} // '') =~ /^Code: (\d+)/;
	return undef;
}

=pod

=item $ch->stop(%opts)

Stops the server: SIGTERM and a wait for it to exit, or with C<< signal =>
'KILL' >> a crash. The data directory stays, so restart() comes back with the
same tables and rows.

=item $ch->restart

Stops the server if it runs, starts it on the same ports and directory and
waits until it answers.

=back

=cut

sub stop
{
	my ($self, %opts) = @_;
	my $handle = delete $self->{handle} or return;
	my $pid    = $handle->{KIDS}[0]{PID};
	@running = grep { $_ != $self } @running;
	eval {
		if (($opts{signal} // 'TERM') eq 'KILL')
		{
			$handle->signal('KILL');
			$handle->finish;
		}
		else
		{
			$handle->kill_kill(grace => 60);
		}
		1;
	} or note("stopping $self->{name}: $@");
	if ($pid && kill(0, $pid))
	{
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
	return;
}

sub restart
{
	my ($self) = @_;
	$self->stop;
	$self->_launch;
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($@, $?);
	$self->stop if $self->{handle};
	return;
}

END
{
	my $status = $?;
	foreach my $server (my @all = @running)
	{
		eval { $server->stop; 1 } or print STDERR "could not stop ClickHouse: $@";
	}
	$? = $status;
}

1;
