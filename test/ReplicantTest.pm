=pod

=head1 NAME

ReplicantTest - helpers shared by replicant's TAP tests

=head1 SYNOPSIS

  use PostgreSQL::Test::Cluster;
  use PostgreSQL::Test::Utils;
  use Test::More;
  use ReplicantTest;

  my $node = new_node('source');
  my $sink = start_sink(secret => 'whsec_...');
  $node->safe_psql('postgres', q{
      CREATE EXTENSION replicant;
      CREATE TABLE t (id int PRIMARY KEY, v text);
      CREATE PUBLICATION pub FOR TABLE t;
  });
  $node->safe_psql('postgres',
      "SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
  $node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'a')");
  ok(wait_until_synced($node, 'postgres', $sink, ['public.t']), 'synced');
  is($sink->stats->{duplicate_transactions}, 0, 'no re-delivery');

=head1 DESCRIPTION

new_node() creates a cluster configured for replicant; start_sink() runs the
reference sink (test/sink/replicant_sink.py) on loopback and returns a
ReplicantTest::Sink; source_rows() and wait_until_synced() compare a source
table with what the sink holds, both canonicalized by the sink script.

=cut

package ReplicantTest;

use strict;
use warnings FATAL => 'all';

use Cwd qw(abs_path);
use Digest::MD5 ();
use Encode ();
use Exporter 'import';
use Fcntl ();
use File::Path ();
use File::Basename qw(basename dirname);
use HTTP::Tiny;
use IPC::Run;
use JSON::PP ();
use List::Util ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(new_node start_sink source_rows wait_until_synced);

# The sink script, found next to this module whatever the current directory.
our $SINK_SCRIPT = dirname(abs_path(__FILE__)) . '/sink/replicant_sink.py';
our $PYTHON      = $ENV{PYTHON} || 'python3';
# Node.js and the npm packages of test/js (`npm ci --prefix test/js`).
our $NODE    = $ENV{NODE} || 'node';
our $JS_DIR  = dirname(abs_path(__FILE__)) . '/js';

# Runs the sink script with the given arguments; returns its stdout.  A
# running reference sink runs it in its own process (POST /_cli), any
# database file alike: starting Python for every look at a sink is what a
# polling test would otherwise spend most of its CPU on.
sub run_sink_script
{
	my ($args, $stdin) = @_;
	my ($out, $err) = ('', '');
	foreach my $sink (ReplicantTest::Sink::running())
	{
		my $response = HTTP::Tiny->new(timeout => 120)->post(
			"http://127.0.0.1:$sink->{port}/_cli",
			{
				content => JSON::PP::encode_json(
					{ argv => $args, stdin => Encode::decode('UTF-8', $stdin // '') })
			});
		return $response->{content} if $response->{status} == 200;
		die "replicant_sink.py @$args failed: $response->{content}"
		  if $response->{status} == 500;
		last;    # not answered: run the script
	}
	IPC::Run::run([ $PYTHON, $SINK_SCRIPT, @$args ],
		'<', \($stdin // ''), '>', \$out, '2>', \$err)
	  or die "replicant_sink.py @$args failed: $err";
	return $out;
}

=pod

=head1 FUNCTIONS

=over

=item new_node($name, %opts)

Creates (and by default starts) a cluster with logical decoding and replicant
preloaded. Options: C<conf> (extra postgresql.conf text), C<start> (default
1), C<preload> (default 1; 0 leaves shared_preload_libraries alone),
C<initdb_extra> (an array of extra initdb arguments, for settings fixed at
initdb such as C<--wal-segsize=1>).

On servers that have C<output_plugin_libraries> (15.19 and later minors),
it is set to allow replicant; older servers would refuse the unknown setting.

=cut

sub new_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	init_from_template($node, allows_streaming => 'logical',
		extra => $opts{initdb_extra} // []);

	# max_connections: room for the sessions safe_psql keeps (Session).
	my $conf = "wal_level = logical\n"
	  . "max_connections = 30\n"
	  . "max_replication_slots = 20\n"
	  . "max_worker_processes = 32\n";
	$conf .= "shared_preload_libraries = 'replicant'\n"
	  if $opts{preload} // 1;
	$conf .= "output_plugin_libraries = 'pgoutput, test_decoding, replicant'\n"
	  if server_has_setting($node, 'output_plugin_libraries');
	$conf .= "$opts{conf}\n" if defined $opts{conf};
	$node->append_conf('postgresql.conf', $conf);

	$node->start if $opts{start} // 1;
	return $node;
}

# Runs $node->init(%params), but with initdb run only once per build
# directory and set of initdb arguments: each node gets a copy of that
# cluster, as PostgreSQL's own suites do with INITDB_TEMPLATE (which PGXS
# does not set, and 15 does not know).  Cluster.pm writes its settings into
# the copy as it would into a new cluster.
sub init_from_template
{
	my ($node, %params) = @_;
	my $system_or_bail = \&PostgreSQL::Test::Utils::system_or_bail;
	no warnings 'redefine';
	local *PostgreSQL::Test::Utils::system_or_bail = sub {
		my @cmd = @_;
		my ($at) = grep { $cmd[$_] eq '-D' || $cmd[$_] eq '--pgdata' } 1 .. $#cmd - 1;
		return $system_or_bail->(@cmd) unless $cmd[0] eq 'initdb' && defined $at;

		# What else initdb's result depends on: its arguments and locale.
		my @locale = sort(grep { /^(LANG|LC_\w+|TZ|PGTZ)$/ } keys %ENV);
		my @key = (@cmd[ 0 .. $at - 1 ], @cmd[ $at + 2 .. $#cmd ],
			map { "$_=$ENV{$_}" } @locale);
		my $template = "$PostgreSQL::Test::Utils::tmp_check/initdb_template_"
		  . Digest::MD5::md5_hex(join("\0", @key));
		open(my $lock, '>', "$template.lock") or die "could not open $template.lock: $!";
		flock($lock, Fcntl::LOCK_EX) or die "could not lock $template.lock: $!";
		if (!-d $template)
		{
			File::Path::rmtree("$template.new");
			$system_or_bail->(@cmd[ 0 .. $at ], "$template.new", @cmd[ $at + 2 .. $#cmd ]);
			rename("$template.new", $template) or die "could not rename $template.new: $!";
		}
		close($lock);
		return $system_or_bail->('cp', '-RPp', $template, $cmd[ $at + 1 ]);
	};
	$node->init(%params);
	return;
}

=pod

=item server_has_setting($node, $name)

True if the node's postgres binary knows the configuration parameter.

=cut

my %describe_config;    # bindir => output of postgres --describe-config

sub server_has_setting
{
	my ($node, $name) = @_;
	my $bindir = $node->config_data('--bindir');
	$describe_config{$bindir} //= do
	{
		my ($out, $err);
		IPC::Run::run([ "$bindir/postgres", '--describe-config' ],
			'>', \$out, '2>', \$err)
		  or die "postgres --describe-config failed: $err";
		$out;
	};
	return $describe_config{$bindir} =~ /^\Q$name\E\t/m;
}

=pod

=item start_sink(%opts)

Starts the reference sink on 127.0.0.1 and returns a ReplicantTest::Sink.
Options: C<secret>, C<keep_bodies> (keep every accepted body and its headers,
see C<< $sink->bodies >>), C<dedup_ids> (answer a request whose webhook-id
was applied already without applying it again: a retry after a timeout on a
loaded machine), C<tls_cert> and C<tls_key> (PEM files: serve HTTPS, and C<url> starts with https://; C<control()> then needs
IO::Socket::SSL), C<name> (names its log file, default "sink", then
"sink2", ...), C<db> (default: a new file in a temporary directory), C<script>
(another sink script taking the same options, such as test/sink/oracle_sink.py), and the
sink's fault flags with underscores: C<fail_status>, C<fail_rate>,
C<fail_first>, C<retry_after>, C<delay_ms>, C<hold_answers> (apply, answer
once a control() clears it), C<hang>, C<reset>, C<redirect>,
C<max_body>. The sink's stderr goes to tmp_check/log/<test>_<name>.log.

=cut

my $sink_count = 0;

sub start_sink
{
	my (%opts) = @_;
	$sink_count++;
	my $name = delete $opts{name} // ($sink_count == 1 ? 'sink' : "sink$sink_count");
	my $dir  = PostgreSQL::Test::Utils::tempdir($name);
	my $test = basename($0);
	$test =~ s/\.[^.]+$//;
	my $self = bless {
		name        => $name,
		dir         => $dir,
		db          => delete $opts{db} // "$dir/sink.db",
		secret      => delete $opts{secret},
		tls_cert    => delete $opts{tls_cert},
		tls_key     => delete $opts{tls_key},
		keep_bodies => delete $opts{keep_bodies},
		dedup_ids   => delete $opts{dedup_ids},
		script      => delete $opts{script} // $SINK_SCRIPT,
		port_file   => "$dir/port",
		log         => "$PostgreSQL::Test::Utils::log_path/${test}_$name.log",
		port        => 0,
	}, 'ReplicantTest::Sink';
	$self->_launch(%opts);
	return $self;
}

=pod

=item source_rows($node, $dbname, $table)

The source table's rows as the sink would store them: C<replicant._encode_row>
of each row, canonicalized and sorted by C<replicant_sink.py canon>, one per
line. Comparable with C<< $sink->dump($table) >>.

=cut

sub source_rows
{
	my ($node, $dbname, $table) = @_;
	my $json = $node->safe_psql($dbname,
		"SELECT replicant._encode_row(t) FROM $table t");
	return run_sink_script(['canon'], $json);
}

=pod

=item wait_until_synced($node, $dbname, $sink, \@tables, $timeout)

Polls until the sink holds exactly the source rows of every table, or the
timeout passes (default: PostgreSQL::Test::Utils' timeout_default, 180 s).
Tables are given as SQL names (C<public.t>, C<"Odd"."Name">). Returns true
on success; on timeout reports the first table that differs with diag() and
returns false. Each comparison starts psql and the sink script for every
table: the pause between comparisons grows from 0.1 s to 1 s, so that a
long wait costs little CPU when many tests run at once.

=cut

sub wait_until_synced
{
	my ($node, $dbname, $sink, $tables, $timeout) = @_;
	$timeout //= $PostgreSQL::Test::Utils::timeout_default;
	my $deadline = time() + $timeout;

	# The sink stores rows under the catalog names, unquoted.
	my @pairs = map {
		[
			$_,
			$node->safe_psql(
				$dbname, "SELECT n.nspname || '.' || c.relname
				  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				 WHERE c.oid = '$_'::regclass")
		]
	} @$tables;

	my $pause = 100_000;
	while (1)
	{
		my $differs;
		foreach my $pair (@pairs)
		{
			my ($source, $sunk) =
			  (source_rows($node, $dbname, $pair->[0]), $sink->dump($pair->[1]));
			next if $source eq $sunk;
			$differs = sprintf('%s: source has %d rows, sink has %d',
				$pair->[0], scalar($source =~ tr/\n//), scalar($sunk =~ tr/\n//));
			last;
		}
		return 1 unless defined $differs;
		if (time() > $deadline)
		{
			diag("wait_until_synced timed out after $timeout s: $differs");
			return 0;
		}
		usleep($pause);
		$pause = List::Util::min($pause * 3 / 2, 1_000_000);
	}
}

=pod

=item slot_name($node, $dbname, $pipeline)

The name of the replication slot of a pipeline created in database $dbname:
C<replicantE<lt>database OIDE<gt>_E<lt>pipelineE<gt>> (for a name short
enough; replicant.status.slot_name shows every pipeline's).

=cut

sub slot_name
{
	my ($node, $dbname, $pipeline) = @_;
	my $oid = $node->safe_psql('postgres',
		"SELECT oid FROM pg_database WHERE datname = '$dbname'");
	return "replicant${oid}_$pipeline";
}

=pod

=item poll($node, $sql, $timeout, $dbname)

Polls a boolean query (in database postgres unless $dbname is given) until
it returns true or $timeout seconds (default 60) passed; an error or a lost
connection (a server restarting) just means "not yet".  The query runs again
and again over one psql session (ReplicantTest::Session), opened for this
poll and closed when it returns: a psql started per attempt costs some 50 ms
of CPU, and a dozen tests polling at once on a small CI machine would spend
its cores on that.

=cut

sub poll
{
	my ($node, $sql, $timeout, $dbname) = @_;
	$timeout //= 60;
	my $deadline = time() + $timeout;
	ReplicantTest::Session::forget($node) if ReplicantTest::Session::disturbs($sql);
	my $session = ReplicantTest::Session->new($node, $dbname // 'postgres');
	my $pause    = 20_000;
	while (time() < $deadline)
	{
		my $out = $session->query($sql, $deadline - time());
		return 1 if defined $out && $out eq 't';
		usleep($pause);
		$pause = List::Util::min($pause * 3 / 2, 200_000);
	}
	diag("timed out after $timeout s waiting for: $sql");
	return 0;
}

=pod

=item set_fault_point($node, $value)

Sets replicant.fault_point to $value (C<undef>: resets it) with ALTER SYSTEM
and reloads the configuration. A worker reads it at its next reload: one
that starts afterwards, or one holding at a fault point, sees it for sure.

=cut

sub set_fault_point
{
	my ($node, $value) = @_;
	$node->safe_psql('postgres',
		($value ? "ALTER SYSTEM SET replicant.fault_point = '$value'" : 'ALTER SYSTEM RESET replicant.fault_point')
		  . ";\nSELECT pg_reload_conf();");
	return;
}

=pod

=item kill_worker($node, $pid)

Kills the worker $pid with SIGKILL and waits until the server it makes the
postmaster restart accepts connections again. It waits for the restart's
log line first: until the postmaster has noticed the death, the server
still answers as before, and a statement sent then fails once it restarts.

=cut

sub kill_worker
{
	my ($node, $pid) = @_;
	my $offset = -s $node->logfile;
	kill 'KILL', $pid or die "could not kill the worker $pid";
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the server did not come back after the crash';
	return;
}

# PostgreSQL::Test::Cluster's own poll_query_until (wait_for_catchup uses
# it too) starts psql for every attempt, ten times a second: the same cost
# as above, so every node polls through a session instead.
{
	no warnings 'redefine';
	*PostgreSQL::Test::Cluster::poll_query_until = \&_poll_query_until;
}

sub _poll_query_until
{
	my ($node, $dbname, $query, $expected) = @_;
	$expected //= 't';
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	ReplicantTest::Session::forget($node) if ReplicantTest::Session::disturbs($query);
	my $session = ReplicantTest::Session->new($node, $dbname);
	my $out;
	while (time() < $deadline)
	{
		$out = $session->query($query // '', $deadline - time());
		return 1 if defined $out && $out eq $expected;
		usleep(100_000);
	}
	diag("poll_query_until timed out executing this query:\n"
		  . ($query // '(connection attempt only)')
		  . "\nexpecting this output:\n$expected\nlast actual query output:\n"
		  . ($out // '(an error)'));
	return 0;
}

=pod

=item require_node(@packages)

Makes sure Node.js runs and test/js holds the given npm packages, installed
by C<npm ci --prefix test/js> (.ci/run does it). Without Node.js the test is
skipped, except under CI=true, where anything missing fails the test.

=cut

sub require_node
{
	my (@packages) = @_;
	my ($out, $err) = ('', '');
	my $runs = eval {
		IPC::Run::run([ $NODE, '--version' ], '<', \'', '>', \$out, '2>', \$err);
	};
	if (!$runs)
	{
		my $why = "Node.js ($NODE) does not run";
		die "$why, and CI=true needs it: install nodejs\n" if $ENV{CI};
		plan skip_all => "$why: install Node.js 20 or later (CI=true fails instead)";
	}
	foreach my $package (@packages)
	{
		die "npm package $package is missing in $JS_DIR: run npm ci --prefix test/js\n"
		  unless -f "$JS_DIR/node_modules/$package/package.json";
	}
	chomp $out;
	note("node $out");
	return;
}

=pod

=item run_node($script, \@args, $stdin)

Runs test/js/$script with Node.js; returns its stdout, dies if it fails.

=cut

sub run_node
{
	my ($script, $args, $stdin) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $NODE, "$JS_DIR/$script", @$args ],
		'<', \($stdin // ''), '>', \$out, '2>', \$err)
	  or die "node $script failed: $err";
	return $out;
}

=pod

=item crash_workload($node, $sink, $pipeline)

The write workload of the crash tests (005, soak): tables kv and txn in
database postgres, a publication and the pipeline $pipeline on them, seeded.
Returns a function that starts the load for $seconds and returns its
IPC::Run handle: pgbench, two clients at 150 txn/s, each transaction
updating two random keys (in random order, so clients deadlock now and then:
--max-tries), upserting a keyed row and inserting its xid into txn, so the
set of committed transactions is known exactly on the source.

=cut

sub crash_workload
{
	my ($node, $sink, $pipeline) = @_;

	$node->safe_psql('postgres', qq{
CREATE EXTENSION replicant;
CREATE TABLE kv (id int PRIMARY KEY, v bigint NOT NULL, client int);
CREATE TABLE txn (id bigserial PRIMARY KEY,
    xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint, client int);
CREATE PUBLICATION ${pipeline}_pub FOR TABLE kv, txn;
});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('$pipeline', '${pipeline}_pub', '$sink->{url}')");
	$node->safe_psql('postgres', q{
BEGIN;
INSERT INTO kv SELECT g, 0, 0 FROM generate_series(1, 100) g;
INSERT INTO txn (client) VALUES (0);
COMMIT;
});

	my $script = PostgreSQL::Test::Utils::tempdir() . "/$pipeline.sql";
	PostgreSQL::Test::Utils::append_to_file($script, q{
\set a random(1, 100)
\set b random(1, 100)
\set c random(1, 500)
BEGIN;
UPDATE kv SET v = v + 1, client = :client_id WHERE id = :a;
UPDATE kv SET v = v + 1, client = :client_id WHERE id = :b;
INSERT INTO kv VALUES (1000 + :c, 1, :client_id) ON CONFLICT (id) DO UPDATE SET v = kv.v + 1;
INSERT INTO txn (client) VALUES (:client_id);
COMMIT;
});

	return sub {
		my ($seconds) = @_;
		my ($out, $err) = ('', '');
		return IPC::Run::start(
			[
				'pgbench', '-n', '-c', '2', '-T', $seconds, '-R', '150', '--max-tries=50',
				'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
			],
			'>', \$out, '2>', \$err);
	};
}

=pod

=back

=head1 ReplicantTest::Sink

Fields: C<url> (C<http://127.0.0.1:PORT/ingest>, or https://), C<port>, C<db>, C<log>.

=over

=item $sink->stop(%opts)

Stops the sink (SIGTERM; C<< signal => 'KILL' >> for a crash). Its database
stays, so restart() resumes with the same rows, watermark and counters.

=item $sink->restart(%opts)

Stops the sink if it runs, then starts it again on the same database and, if
possible, the same port (the url is updated if not). %opts are start_sink()'s
fault flags, which replace the previous ones; C<secret>, C<keep_bodies> and
C<dedup_ids> are kept unless given.

=item $sink->control(\%faults)

Changes faults at runtime (POST /_control): keys as for start_sink(), undef
or 0 switches one off, C<< clear => 1 >> switches all off first. Without an
argument, returns the current settings (GET /_control).

=item $sink->dump($table)

The stored rows of C<schema.table> (all tables, each line prefixed by
C<schema.table >, when omitted) as sorted canonical JSON lines.

=item $sink->ids($table), $sink->has_ids($table, $from, $to)

The C<id> values of the table's rows the sink holds, sorted and
comma-separated; whether it comes to hold exactly C<$from .. $to> (polled up
to 120 s, with a diag of what it has otherwise).

=item $sink->deliveries($table)

A hash of the stored rows of C<schema.table>: canonical key JSON (for a
key-less table, the whole row) => how many inserts, updates and reads the
sink applied to that key.

=item $sink->stats, $sink->txlog, $sink->messages, $sink->bodies

Counters (a hash, with C<watermarks> and the C<accepted> request list: per
request its C<webhook_id>, C<kind>, C<changes>, C<tables> and a snapshot
batch's C<snapshot> object), the
applied transactions in apply order, the stored messages and, with
C<keep_bodies>, the accepted requests in arrival order (arrays of hashes;
a body is C<< {webhook_id, headers => {lower-case name => value}, body} >>
with the JSON body decoded), read from the sink's database; they work while
the sink is stopped.

=item $sink->raw_bodies

As C<bodies>, but each body as received, base64-encoded in C<body_base64>:
the exact bytes a signature covers.

=back

=cut

package ReplicantTest::Sink;

use strict;
use warnings FATAL => 'all';

use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my @running;    # sinks to stop when the test script ends

sub _launch
{
	my ($self, %faults) = @_;
	my @args = ('serve', '--port', $self->{port}, '--port-file',
		$self->{port_file}, '--db', $self->{db});
	push @args, '--secret', $self->{secret} if defined $self->{secret};
	push @args, '--keep-bodies' if $self->{keep_bodies};
	push @args, '--dedup-ids'   if $self->{dedup_ids};
	push @args, '--tls-cert', $self->{tls_cert}, '--tls-key', $self->{tls_key}
	  if defined $self->{tls_cert};
	foreach my $flag (sort keys %faults)
	{
		my $value = $faults{$flag};
		next unless defined $value;
		(my $option = "--$flag") =~ tr/_/-/;
		if ($flag eq 'hang' || $flag eq 'reset' || $flag eq 'hold_answers')
		{
			push @args, $option if $value;
		}
		else
		{
			push @args, $option, $value;
		}
	}

	unlink $self->{port_file};
	$self->{handle} = IPC::Run::start(
		[ $ReplicantTest::PYTHON, $self->{script}, @args ],
		'<', '/dev/null', '>>', $self->{log}, '2>>', $self->{log});

	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until (-s $self->{port_file})
	{
		if (!$self->{handle}->pumpable)
		{
			# Most likely the old port is taken: start on a new one.
			if ($self->{port})
			{
				note("sink $self->{name} could not reuse port $self->{port}");
				$self->{port} = 0;
				return $self->_launch(%faults);
			}
			die "sink $self->{name} exited at start, see $self->{log}";
		}
		die "sink $self->{name} did not start, see $self->{log}"
		  if time() > $deadline;
		usleep(50_000);
	}
	chomp($self->{port} = PostgreSQL::Test::Utils::slurp_file($self->{port_file}));
	delete $self->{port_holder};
	$self->{scheme} = defined $self->{tls_cert} ? 'https' : 'http';
	$self->{url} = "$self->{scheme}://127.0.0.1:$self->{port}/ingest";
	push @running, $self unless grep { $_ == $self } @running;
	return;
}

# The reference sinks running over HTTP, which can run the script's other
# commands (run_sink_script).
sub running
{
	return grep {
		$_->{scheme} eq 'http'
		  && $_->{script} eq $ReplicantTest::SINK_SCRIPT
		  && $_->{handle}
		  && $_->{handle}->pumpable
	} @running;
}

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
			$handle->kill_kill(grace => 5);
		}
		1;
	} or note("stopping sink $self->{name}: $@");
	# Whatever went wrong above, the process must not outlive this call.
	if ($pid && kill(0, $pid))
	{
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
	# Hold the port until a restart: a socket bound to it, not listening,
	# refuses connections as a sink that is down does, and keeps another
	# process's connection or port-0 bind from taking the port meanwhile
	# (a restart then started elsewhere, and the pipeline's requests went
	# to whatever had the old port).  The sink binds next to it
	# (SO_REUSEADDR on both, neither listening yet); _launch lets it go.
	$self->{port_holder} = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => $self->{port},
		Proto     => 'tcp',
		ReuseAddr => 1)
	  if $self->{port};
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($@, $?);
	$self->stop if $self->{handle};
	return;
}

sub restart
{
	my ($self, %opts) = @_;
	$self->stop;
	$self->{secret} = delete $opts{secret} if exists $opts{secret};
	$self->{keep_bodies} = delete $opts{keep_bodies} if exists $opts{keep_bodies};
	$self->{dedup_ids}   = delete $opts{dedup_ids}   if exists $opts{dedup_ids};
	$self->_launch(%opts);
	return;
}

sub control
{
	my ($self, $faults) = @_;
	my $url  = "$self->{scheme}://127.0.0.1:$self->{port}/_control";
	my $http = HTTP::Tiny->new(timeout => 10);
	my $r =
	  defined $faults
	  ? $http->post($url, { content => encode_json($faults) })
	  : $http->get($url);
	die "sink control failed: $r->{status} $r->{reason}" unless $r->{success};
	return defined $faults ? undef : decode_json($r->{content});
}

sub dump
{
	my ($self, $table) = @_;
	return ReplicantTest::run_sink_script(
		[ 'dump', '--db', $self->{db}, defined $table ? ('--table', $table) : () ]);
}

sub ids
{
	my ($self, $table) = @_;
	return join(',', sort { $a <=> $b } map { /"id":\s*(\d+)/ ? $1 : () } split /\n/, $self->dump($table));
}

sub has_ids
{
	my ($self, $table, $from, $to) = @_;
	my $want = join(',', $from .. $to);
	for (1 .. 600)
	{
		return 1 if $self->ids($table) eq $want;
		Time::HiRes::usleep(200_000);
	}
	Test::More::diag("$self->{name} has " . $self->ids($table));
	return 0;
}

sub deliveries
{
	my ($self, $table) = @_;
	my $out = ReplicantTest::run_sink_script(
		[ 'dump', '--db', $self->{db}, '--table', $table, '--counts' ]);
	return { map { split /\t/ } split /\n/, $out };
}

sub stats
{
	my ($self) = @_;
	return decode_json(ReplicantTest::run_sink_script([ 'stats', '--db', $self->{db} ]));
}

sub _json_lines
{
	my ($self, $command, @options) = @_;
	my $out = ReplicantTest::run_sink_script([ $command, @options, '--db', $self->{db} ]);
	return [ map { decode_json($_) } split /\n/, $out ];
}

sub txlog    { return $_[0]->_json_lines('txlog'); }
sub messages { return $_[0]->_json_lines('messages'); }
sub bodies   { return $_[0]->_json_lines('bodies'); }
sub raw_bodies { return $_[0]->_json_lines('bodies', '--raw'); }

# A test killed by a signal (a timeout) still runs the END block below.
foreach my $signal (qw(TERM INT HUP))
{
	$SIG{$signal} = sub { die "killed by SIG$signal\n"; }
	  if ($SIG{$signal} // 'DEFAULT') eq 'DEFAULT';
}

END
{
	# Don't leave sinks behind, even when a test dies: each one is stopped
	# even if stopping another one failed.  stop() edits @running, so walk
	# a copy (iterating @running itself stopped after the first sink).
	my $status = $?;
	foreach my $sink (my @all = @running)
	{
		eval { $sink->stop; 1 } or print STDERR "could not stop a sink: $@";
	}
	$? = $status;
}

1;

package ReplicantTest::Session;

# One psql session that runs queries one after the other: for pollers, and
# for the plain reads of safe_psql (cached_read).  It starts on first use and
# starts again after psql exited (a server that restarted), and it ends with
# the object.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use List::Util ();

my $END_MARK = '__replicant_session_end__';

sub new
{
	my ($class, $node, $dbname) = @_;
	return bless { node => $node, dbname => $dbname }, $class;
}

# query($sql, $seconds): the query's output (psql -XAtq, chomped), or undef
# when it failed, psql lost its connection or $seconds passed.
sub query
{
	my ($self, $sql, $seconds) = @_;
	$self->_start unless $self->{handle};
	@{$self}{qw(out err)} = ('', '');
	# On a line of its own: the query may end in a comment.  A statement,
	# not \echo: a statement left open (a parenthesis, a quote) swallows it
	# and times out, where \echo would print the mark and pass.
	$self->{in} .= "$sql\n;\nSELECT '$END_MARK';\n";
	$self->{timer}->start(List::Util::max($seconds, 1));
	my $done = eval {
		$self->{handle}->pump until $self->_ended || !$self->{handle}->pumpable;
		1;
	};
	if (!$done || !$self->_ended)
	{
		$self->_stop;
		return undef;
	}
	# An error, or a lost connection, which psql reports (a WARNING when a
	# crash of another process ended it) and then goes on unconnected.
	if ($self->{err} =~
		/\b(?:ERROR|FATAL|PANIC):|terminating connection|server closed the connection|connection to (?:the )?server|not connected/
	  )
	{
		$self->_stop;
		return undef;
	}
	my $out = substr($self->{out}, 0, -length("$END_MARK\n"));
	chomp $out;
	return $out;
}

# The end mark is the last line psql printed: looking at the tail keeps a
# large result from being scanned again at every read.
sub _ended
{
	my ($self) = @_;
	my $tail = "$END_MARK\n";
	return length($self->{out}) >= length($tail)
	  && substr($self->{out}, -length($tail)) eq $tail;
}

sub _start
{
	my ($self) = @_;
	my $node = $self->{node};
	local %ENV = $node->_get_env();
	@{$self}{qw(in out err)} = ('', '', '');
	$self->{timer} = IPC::Run::timeout(1);
	$self->{handle} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($self->{dbname})
		],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err},
		$self->{timer});
	return;
}

sub _stop
{
	my ($self) = @_;
	my $handle = delete $self->{handle} or return;
	eval { $handle->kill_kill(grace => 1); };
	return;
}

sub DESTROY
{
	my ($self) = @_;
	# Neither the test's exit status nor its error is this one's to change.
	local ($@, $?);
	my $handle = delete $self->{handle} or return;
	# Ending psql's input ends the session: the backend is gone (or going)
	# when the poll returns.  At the script's end the timer may be gone first.
	$self->{in} .= "\\q\n";
	eval { $self->{timer}->start(10); $handle->finish; 1 }
	  or eval { $handle->kill_kill(grace => 1); };
	return;
}

# ---- safe_psql over a kept session ---------------------------------------------
#
# A psql and a backend started for each safe_psql cost some 60 ms of CPU on a
# small machine; tests make thousands of calls.  A read that can tell no
# session from another (one SELECT, WITH, TABLE, VALUES or SHOW statement, no
# function that keeps session state or looks at sessions) runs over a
# session kept per node and database; a read on a session that fails runs
# as before.  So do statements that change nothing of the session either
# (no SET, transaction control, temporary object, COPY, cursor, LISTEN or
# meta-command), followed by DISCARD ALL: once the session answered a ping,
# since a statement that failed cannot be run again (it may have done its
# work), its failure is safe_psql's (an error, the session ended).  Anything
# else runs as before.
# Statements that a kept session could disturb or be disturbed by
# (databases created, altered or dropped, extensions changed, settings
# reloaded, roles altered, sessions listed or terminated) first end the
# node's kept sessions.

my %cached;    # "node name\0dbname" => [ postmaster PID, session ]

my $PLAIN_READ = qr/\A\s*(?:SELECT|WITH|TABLE|VALUES|SHOW)\b/i;
my $SESSION_BOUND = qr/
	pg_stat_activity | pg_terminate_backend | pg_cancel_backend | set_config
	| advisory | pg_backend_pid | txid_current | pg_current_xact_id
	| pg_export_snapshot | pg_sleep | pg_notify | _slot\b | pg_logical
	| pg_replication_origin | pg_reload_conf | pg_temp
	| \blo_ | dblink | \bFOR\s+(?:UPDATE|SHARE|NO\s+KEY|KEY) /xi;
my $DISTURBS = qr/
	\bDATABASE\b | \bEXTENSION\b | pg_stat_activity | pg_terminate_backend
	| pg_reload_conf | ALTER\s+(?:ROLE|USER|SYSTEM) /xi;

my $SESSION_STATE = qr/
	(?:\A|;)\s*(?:SET|RESET|BEGIN|START|COMMIT|ROLLBACK|END|ABORT|SAVEPOINT|RELEASE
		|PREPARE|EXECUTE|DEALLOCATE|DECLARE|FETCH|CLOSE|MOVE|LISTEN|UNLISTEN
		|DISCARD|LOAD|LOCK)\b
	| \bTEMP(?:ORARY)?\b | \bSESSION\b | \bCOPY\b | \bpg_sleep | \\ /xi;

# Whether the statements can run over a kept session (below).
sub is_session_neutral
{
	my ($sql) = @_;
	return defined $sql && $sql !~ $SESSION_STATE && $sql !~ $SESSION_BOUND && $sql !~ $DISTURBS;
}

sub is_plain_read
{
	my ($sql) = @_;
	return 0 unless defined $sql && $sql =~ $PLAIN_READ && $sql !~ $SESSION_BOUND;
	(my $body = $sql) =~ s/;\s*\z//;
	return $body !~ /[;\\]/;
}

# The read's output, or undef when it must run as before.
sub cached_read
{
	my ($node, $dbname, $sql) = @_;
	my $key = $node->name . "\0" . $dbname;
	my $pid = $node->{_pid} // 0;
	delete $cached{$key} if $cached{$key} && $cached{$key}[0] != $pid;
	$cached{$key} //= [ $pid, ReplicantTest::Session->new($node, $dbname) ];
	my $out = $cached{$key}[1]->query($sql, 2 * $PostgreSQL::Test::Utils::timeout_default);
	delete $cached{$key} unless defined $out;
	return $out;
}

# Runs statements that are no plain read over the kept session, followed by
# DISCARD ALL: (1, output) when they ran, (0, psql's stderr) when they
# failed (the session is ended), an empty list when no session answers (run
# them as before).  They run once: a statement that failed may have done its
# work.
sub try_write
{
	my ($node, $dbname, $sql) = @_;
	return () unless defined cached_read($node, $dbname, 'SELECT 1');
	my $session = $cached{ $node->name . "\0" . $dbname }[1];
	# What the regexes miss (a trigger's set_config, a SET after a comment)
	# does not outlive the call; an open transaction makes DISCARD fail.
	my $out = $session->query("$sql\n;\nDISCARD ALL", 2 * $PostgreSQL::Test::Utils::timeout_default);
	return (1, $out) if defined $out;
	forget($node);
	return (0, $session->{err}) if ($session->{err} // '') ne '';
	return (0, "kept session: no answer within the timeout, or psql exited (the statements may have run)");
}

# try_write for safe_psql: undef when the statements must run as before,
# else their output; dies as safe_psql does when they fail.
sub session_write
{
	my ($node, $dbname, $sql) = @_;
	my ($ok, $out) = try_write($node, $dbname, $sql);
	return undef unless defined $ok;
	return $out if $ok;
	die "error running SQL over a kept session: '$out'\nwith sql '$sql'";
}

sub forget
{
	my ($node) = @_;
	my $prefix = $node->name . "\0";
	delete @cached{ grep { index($_, $prefix) == 0 } keys %cached };
	return;
}

sub disturbs
{
	my ($sql) = @_;
	return defined $sql && $sql =~ $DISTURBS;
}

{
	no warnings 'redefine';
	my $safe_psql = \&PostgreSQL::Test::Cluster::safe_psql;
	my $psql      = \&PostgreSQL::Test::Cluster::psql;
	my $reload    = \&PostgreSQL::Test::Cluster::reload;
	*PostgreSQL::Test::Cluster::safe_psql = sub {
		my ($node, $dbname, $sql, @params) = @_;
		if (!@params && is_plain_read($sql))
		{
			my $out = cached_read($node, $dbname, $sql);
			return $out if defined $out;
		}
		elsif (!@params && is_session_neutral($sql))
		{
			my $out = session_write($node, $dbname, $sql);
			return $out if defined $out;
		}
		return $safe_psql->(@_);
	};
	*PostgreSQL::Test::Cluster::psql = sub {
		my ($node, $dbname, $sql) = @_;
		forget($node) if disturbs($sql);
		return $psql->(@_);
	};
	*PostgreSQL::Test::Cluster::reload = sub {
		forget($_[0]);
		return $reload->(@_);
	};
}

1;
