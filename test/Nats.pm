=pod

=head1 NAME

Nats - a private three-node NATS JetStream cluster for one TAP test

=head1 SYNOPSIS

  use Nats;

  Nats::require_server();
  my $nats = Nats->start(max_payload => 65536);
  $nats->create_stream('S', 'replicant.p.>', duplicates_ms => 2000);
  my $url = $nats->url('S');        # nats://127.0.0.1:P1,127.0.0.1:P2,.../S
  my @msgs = $nats->messages('S');  # every message, in stream order
  $nats->stop_node(0, 'KILL');      # one node down; start_node(0) brings it back
  $nats->stop_all;  $nats->start_all;

=head1 DESCRIPTION

start() runs three nats-server processes as the user running the tests, on
loopback and free ports, as one JetStream cluster, each with its store in a
temporary directory and its log in tmp_check/log/<test>_nats<i>.log.
messages() reads a stream back with test/nats/nats_tool.c, the tests' own
client against libnats (built once per test into a temporary directory);
each message is a hash: seq, subject, headers (a hash), data (the body as a
string) and json (the body decoded). Servers still running when the test
ends are stopped.

=cut

package Nats;

use strict;
use warnings FATAL => 'all';

use Cwd qw(abs_path);
use File::Basename qw(basename dirname);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our $TOOL_SOURCE = dirname(abs_path(__FILE__)) . '/nats/nats_tool.c';

my @running;    # clusters to stop when the test script ends

sub server_binary
{
	foreach my $dir ('/usr/sbin', '/usr/bin', split(/:/, $ENV{PATH} // ''))
	{
		return "$dir/nats-server" if -x "$dir/nats-server";
	}
	return undef;
}

=pod

=head1 FUNCTIONS

=over

=item require_server()

Skips the test when nats-server or libnats (nats/nats.h) is missing; under
CI=true (.ci/run installs both) that is a failure instead.

=item server_version()

nats-server's version as a number: 2.11.0 is 21100 (0 if unknown).

=back

=cut

sub server_version
{
	my $binary = server_binary() or return 0;
	my $out = `$binary --version`;
	my ($major, $minor, $patch) = $out =~ /v(\d+)\.(\d+)\.(\d+)/ or return 0;
	return $major * 10000 + $minor * 100 + $patch;
}

sub require_server
{
	my $why;
	$why = 'nats-server is not installed' unless defined server_binary();
	$why //= 'libnats-dev is not installed' unless -e '/usr/include/nats/nats.h';
	return unless defined $why;
	die "$why, and CI=true needs it (apt-get install nats-server libnats-dev)\n"
	  if $ENV{CI};
	plan skip_all => "$why (apt-get install nats-server libnats-dev; CI=true fails instead)";
}

=pod

=head1 METHODS

=over

=item Nats->start(%opts)

Starts the cluster (C<max_payload> sets the servers' limit, C<conf> is more
configuration for every node, C<tool_env> the environment nats_tool needs to
connect: NATS_CA, NATS_USER, NATS_PASSWORD) and waits until JetStream
answers on every node; returns the cluster object.

=cut

sub start
{
	my ($class, %opts) = @_;
	my $test = basename($0);
	$test =~ s/\.[^.]+$//;
	my $dir = PostgreSQL::Test::Utils::tempdir('nats');
	my $self = bless { dir => $dir, nodes => [], test => $test, tool_env => $opts{tool_env} // {} },
	  $class;

	$self->{tool} = "$dir/nats_tool";
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'cc', '-O1', '-o', $self->{tool}, $TOOL_SOURCE, '-lnats' ],
		'>', \$out, '2>', \$err)
	  or die "could not build nats_tool: $err";

	foreach my $i (0 .. 2)
	{
		push @{ $self->{nodes} },
		  {
			name         => "n$i",
			port         => PostgreSQL::Test::Cluster::get_free_port(),
			cluster_port => PostgreSQL::Test::Cluster::get_free_port(),
			store        => "$dir/n$i",
			log          => "$PostgreSQL::Test::Utils::log_path/${test}_nats$i.log",
		  };
	}
	my $routes = join(', ',
		map { "nats-route://127.0.0.1:$_->{cluster_port}" } @{ $self->{nodes} });
	foreach my $node (@{ $self->{nodes} })
	{
		my $conf = "server_name: $node->{name}\n"
		  . "listen: 127.0.0.1:$node->{port}\n"
		  . "jetstream { store_dir: \"$node->{store}\", max_memory_store: 64MB, max_file_store: 1GB }\n"
		  . "cluster { name: replicant_test, listen: 127.0.0.1:$node->{cluster_port}, routes: [ $routes ] }\n";
		$conf .= "max_payload: $opts{max_payload}\n" if $opts{max_payload};
		$conf .= "$opts{conf}\n" if defined $opts{conf};
		$node->{conf} = "$dir/$node->{name}.conf";
		PostgreSQL::Test::Utils::append_to_file($node->{conf}, $conf);
	}
	push @running, $self;
	$self->start_node($_) foreach 0 .. 2;
	$self->wait_for_jetstream;
	return $self;
}

=pod

=item $nats->servers

The nodes' URLs, nats://127.0.0.1:PORT, comma-separated.

=item $nats->url($stream, $query)

A sink URL naming every node and the stream (and the query, if given).

=cut

sub servers
{
	my ($self) = @_;
	return join(',', map { "nats://127.0.0.1:$_->{port}" } @{ $self->{nodes} });
}

sub url
{
	my ($self, $stream, $query) = @_;
	my $hosts = join(',', map { "127.0.0.1:$_->{port}" } @{ $self->{nodes} });
	return "nats://$hosts/$stream" . (defined $query ? "?$query" : '');
}

=pod

=item $nats->tool(@args)

Runs nats_tool with the cluster's servers; returns (exit code, stdout, stderr).

=cut

sub tool
{
	my ($self, $command, @args) = @_;
	my ($out, $err) = ('', '');
	local @ENV{ keys %{ $self->{tool_env} } } = values %{ $self->{tool_env} };
	IPC::Run::run([ $self->{tool}, $command, $self->servers, @args ],
		'<', '/dev/null', '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

# Retries a tool command until it succeeds (a cluster electing its leaders
# answers "no responders" or times out for a while); dies after the timeout.
sub tool_ok
{
	my ($self, @args) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	for (;;)
	{
		my ($rc, $out, $err) = $self->tool(@args);
		return $out if $rc == 0;
		die "nats_tool @args failed: $err" if time() > $deadline;
		usleep(200_000);
	}
}

sub wait_for_jetstream
{
	my ($self) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	for (;;)
	{
		# "leader" of a stream that does not exist: JetStream answers "not found"
		my ($rc, $out, $err) = $self->tool('leader', '__probe__');
		return if $err =~ /10059|not found/i;
		die "JetStream did not come up: $err" if time() > $deadline;
		usleep(200_000);
	}
}

=pod

=item $nats->create_stream($name, $subjects, %opts)

A file-backed stream of 3 replicas on $subjects; C<duplicates_ms> (default
120000) is its duplicate window, C<max_msg_size> its message limit.

=item $nats->create_stream_config($name, \%config)

A stream of the given JetStream configuration (the API's JSON names:
subjects, sources, subject_delete_marker_ttl, ...; name, storage file and
3 replicas unless given), created through the API itself, so that a
configuration the tests' libnats does not know can be made.

=item $nats->update_stream_config($name, \%config)

The same for an existing stream: its whole new configuration.

=item $nats->messages($stream)

Every message of the stream, in stream order (see DESCRIPTION), read once
the stream has a leader and every replica is current: a node restarted a
moment ago answers from the state it had when it stopped (nats-server 2.9),
without the messages acknowledged while it was down.  So it cannot read a
stream one of whose nodes is down: it dies after the tests' timeout.

=item $nats->leader($stream)

The name (n0, n1, n2) of the node leading the stream.

=cut

sub create_stream
{
	my ($self, $name, $subjects, %opts) = @_;
	$self->tool_ok('create', $name, $subjects, 3, $opts{duplicates_ms} // 120000,
		defined $opts{max_msg_size} ? ($opts{max_msg_size}) : ());
	return;
}

sub create_stream_config
{
	my ($self, $name, $config, $verb) = @_;
	my %config = (name => $name, storage => 'file', num_replicas => 3, %$config);
	$self->tool_ok('api', "\$JS.API.STREAM." . ($verb // 'CREATE') . ".$name",
		JSON::PP->new->canonical->encode(\%config));
	return;
}

sub update_stream_config
{
	my ($self, $name, $config) = @_;
	$self->create_stream_config($name, $config, 'UPDATE');
	return;
}

sub messages
{
	my ($self, $stream) = @_;
	my $out = $self->tool_ok('dump', $stream);
	my @msgs;
	foreach my $line (grep { /\S/ } split /\n/, $out)
	{
		my $m = JSON::PP->new->utf8(0)->decode($line);
		$m->{json} = eval { JSON::PP->new->utf8(1)->decode($m->{data}) };
		push @msgs, $m;
	}
	return @msgs;
}

sub leader
{
	my ($self, $stream) = @_;
	my $out = $self->tool_ok('leader', $stream);
	chomp $out;
	return $out;
}

=pod

=item $nats->stop_node($i, $signal), $nats->start_node($i)

Stops node $i (SIGTERM, or e.g. 'KILL') and waits for it to exit; starts it
again with its store.

=item $nats->stop_all($signal), $nats->start_all

All three, then (start_all) waits until JetStream answers.

=item $nats->pause_all, $nats->resume_all

SIGSTOP and SIGCONT to all three: connections stay open, nothing answers.

=back

=cut

sub start_node
{
	my ($self, $i) = @_;
	my $node = $self->{nodes}[$i];
	return if $node->{handle};
	$node->{handle} = IPC::Run::start(
		[ server_binary(), '-c', $node->{conf}, '-l', $node->{log} ],
		'<', '/dev/null', '>>', $node->{log}, '2>>', $node->{log});
	return;
}

sub stop_node
{
	my ($self, $i, $signal) = @_;
	my $node   = $self->{nodes}[$i];
	my $handle = delete $node->{handle} or return;
	my $pid    = $handle->{KIDS}[0]{PID};
	eval {
		$handle->signal($signal // 'TERM');
		$handle->finish;
		1;
	} or note("stopping nats node $i: $@");
	if ($pid && kill(0, $pid))
	{
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
	return;
}

sub stop_all
{
	my ($self, $signal) = @_;
	$self->stop_node($_, $signal) foreach 0 .. 2;
	return;
}

sub pause_all
{
	my ($self) = @_;
	kill 'STOP', $_->{handle}{KIDS}[0]{PID} foreach grep { $_->{handle} } @{ $self->{nodes} };
	return;
}

sub resume_all
{
	my ($self) = @_;
	kill 'CONT', $_->{handle}{KIDS}[0]{PID} foreach grep { $_->{handle} } @{ $self->{nodes} };
	return;
}

sub start_all
{
	my ($self) = @_;
	$self->start_node($_) foreach 0 .. 2;
	$self->wait_for_jetstream;
	return;
}

=pod

=head1 CHECKS

=over

=item Nats::problems(\@msgs, $pipeline)

What is wrong with a pipeline's messages in a stream (an empty list when
nothing is): a Nats-Msg-Id seen twice, changes and messages of the stream
out of (commit_lsn, position) order, positions of a transaction that do not
run 1, 2, ... without a gap, a header that does not match the id.

=item Nats::table_state(\@msgs, $schema, $table)

The table as a consumer applying the messages in stream order would hold
it: a hash from each key (canonical JSON) to its row (canonical JSON).

=item Nats::source_state($node, $dbname, $sql_table)

The same of the source table, through replicant._encode_row().

=back

=cut

my $canon = JSON::PP->new->canonical->utf8(0);

sub problems
{
	my ($msgs, $pipeline) = @_;
	my (@problems, %seen);
	my ($last_lsn, $last_pos) = (-1, -1);
	foreach my $m (@$msgs)
	{
		my $h  = $m->{headers};
		my $id = $h->{'Nats-Msg-Id'} // '';
		push @problems, "seq $m->{seq}: Nats-Msg-Id $id seen twice" if $seen{$id}++;
		next unless ($h->{'Replicant-Kind'} // '') =~ /^(change|message)$/;
		my ($lsn, $pos) = $id =~ /^\Q$pipeline\E:(\d+):(\d+)$/
		  or push(@problems, "seq $m->{seq}: id $id is no stream id"), next;
		push @problems, "seq $m->{seq}: headers do not match the id"
		  unless ($h->{'Replicant-Commit-Lsn'} // '') eq $lsn
		  && ($h->{'Replicant-Position'} // '') eq $pos;
		if ($pos == 0)
		{
			push @problems, "seq $m->{seq}: $lsn:0 after $last_lsn:$last_pos"
			  unless $lsn > $last_lsn;
		}
		elsif ($lsn == $last_lsn)
		{
			push @problems, "seq $m->{seq}: $lsn:$pos after $last_lsn:$last_pos"
			  unless $pos == $last_pos + 1;
		}
		else
		{
			push @problems, "seq $m->{seq}: $lsn:$pos after $last_lsn:$last_pos"
			  unless $lsn > $last_lsn && $pos == 1;
		}
		($last_lsn, $last_pos) = ($lsn, $pos);
	}
	return @problems;
}

sub table_state
{
	my ($msgs, $schema, $table) = @_;
	my %rows;
	foreach my $m (@$msgs)
	{
		my $c = $m->{json} or next;
		next unless ($c->{op} // '') ne '' && $c->{schema} eq $schema && $c->{table} eq $table;
		if ($c->{op} eq 'truncate') { %rows = (); next; }
		my $key = $canon->encode($c->{key});
		if ($c->{op} eq 'delete') { delete $rows{$key}; next; }
		$rows{$key} = $canon->encode($c->{new});
	}
	return \%rows;
}

sub source_state
{
	my ($node, $dbname, $sql_table, $key_columns) = @_;
	my $out = $node->safe_psql($dbname, "SELECT replicant._encode_row(t) FROM $sql_table t");
	my %rows;
	foreach my $line (grep { /\S/ } split /\n/, $out)
	{
		my $row = JSON::PP->new->utf8(1)->decode($line);
		my %key = map { $_ => $row->{$_} } @$key_columns;
		$rows{ $canon->encode(\%key) } = $canon->encode($row);
	}
	return \%rows;
}

sub DESTROY
{
	my ($self) = @_;
	local ($@, $?);
	$self->stop_all('KILL') if grep { $_->{handle} } @{ $self->{nodes} };
	return;
}

END
{
	my $status = $?;
	foreach my $cluster (@running)
	{
		$cluster->resume_all;
		$cluster->stop_all('KILL');
	}
	$? = $status;
}

1;
