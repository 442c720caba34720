=pod

=head1 NAME

Oracle - the differential test: runs a history (test/OracleGen.pm) against
a replicant pipeline and a PostgreSQL subscriber, and compares them

=head1 SYNOPSIS

  my $result = Oracle::run_history($history, label => "seed $seed");
  # $result->{ok}, $result->{failure}{kind, where, detail, step}, $result->{signature}
  my $shorter = Oracle::shrink($history, $result, seconds => 1800);

=head1 DESCRIPTION

Two clusters of the same server version: the publisher, with the
publications, the pipeline "p" and the generated workload, and the
subscriber, whose subscription "osub" subscribes to the pipeline's
publications.  The pipeline delivers to test/sink/oracle_sink.py, which
applies batches effect-once into SQLite and checks the per-batch
invariants.  At each comparison point everything is quiet (no writer, no
backfill, the pipeline and the subscriber caught up), the invariants of
every batch received since are checked, and each delivered (or once
delivered) table is compared: the subscriber's rows, encoded by
replicant._encode_row (the same encoder, the same server version) and
projected on the published columns, against the sink's rows; canonical
JSON, so the comparison is exact.

What the subscriber cannot do by itself, the runner does for it, and what
replicant does differently by design, the runner expects precisely; each
is described at the code that does it and in test/README.md
("Differential test").

=cut

package Oracle;

use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Copy ();
use File::Path ();
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ReplicantTest;
use OracleGen;

our $ORACLE_SINK = dirname(abs_path(__FILE__)) . '/sink/oracle_sink.py';
my $JSON = JSON::PP->new->canonical->utf8;
my $runs = 0;

# ---- small helpers -----------------------------------------------------------------
sub new
{
	my ($class, $history, %opts) = @_;
	return bless {
		h => $history, strict => $opts{strict} // 1, label => $opts{label} // 'history',
		mutant => $opts{mutant}, quiet => $opts{quiet}, failure => undef, n => 0,
		crashes => 0, sink_crashes => 0, redelivered => 0, checked => 0, requests_seen => 0,
		policy => { entries => [], quiet => [] }, frozen => {}, bursts => [], expect => [],
		extra_backfills => [], notes => [], compares => 0, started => time(),
	}, $class;
}

sub note_msg
{
	my ($r, $msg) = @_;
	note(sprintf('%s [%.0fs]: %s', $r->{label}, time() - $r->{started}, $msg)) unless $r->{quiet};
	push @{ $r->{notes} }, $msg;
	return;
}

# Records the first failure and unwinds to run().
sub flunk
{
	my ($r, $kind, $where, $detail) = @_;
	$r->{failure} //= { kind => $kind, where => $where, detail => $detail // '', step => $r->{n} };
	die "oracle failure\n";
}

sub conn_error
{
	my ($err) = @_;
	return $err =~ /could not connect|connection to server|server closed the connection|terminating connection|the database system is (starting up|in recovery|shutting down|not yet accepting)|no connection to the server|Connection refused|SSL SYSCALL|connection .* failed|^psql: ack Broken pipe/;
}

# SQL on a node, retried while the server restarts.  Returns (ok, stdout, stderr).
sub try_sql
{
	my ($r, $node, $sql, %o) = @_;
	my $deadline = time() + ($o{timeout} // 180);
	# A plain read over a kept session (ReplicantTest::Session): the
	# comparisons and waits poll, a psql and a backend each time otherwise.
	if (ReplicantTest::Session::is_plain_read($sql))
	{
		my $out = ReplicantTest::Session::cached_read($node, $o{db} // 'postgres', $sql);
		return (1, $out, '') if defined $out;
	}
	# Writes too, when they leave the session as they found it.  The session
	# answered a ping just before and the crashes and restarts the history
	# injects end it first (crash, stop): a connection lost now is one
	# nobody injected, and the statements may have run, so they are not
	# run again; a crash is reported as one.
	elsif (ReplicantTest::Session::is_session_neutral($sql))
	{
		my ($ok, $out) = ReplicantTest::Session::try_write($node, $o{db} // 'postgres', $sql);
		return (1, $out, '') if $ok;
		if (defined $ok)
		{
			return (0, '', $out) unless conn_error($out);
			$r->check_log;
			return (0, '', "the connection was lost after the statements were sent (they may have run): $out");
		}
	}
	while (1)
	{
		my ($ret, $out, $err);
		# psql that finds the server in recovery exits before it read its
		# input, and IPC::Run dies writing it ("ack Broken pipe"): that is
		# a connection error too.
		eval { ($ret, $out, $err) = $node->psql($o{db} // 'postgres', $sql); 1 }
		  or ($ret, $err) = (undef, "psql: $@");
		return (1, $out, $err) if defined $ret && $ret == 0;
		$err //= '';
		if (conn_error($err) && time() < $deadline)
		{
			usleep(250_000);
			next;
		}
		return (0, $out, $err);
	}
}

sub pub_sql
{
	my ($r, $sql, %o) = @_;
	my ($ok, $out, $err) = $r->try_sql($r->{pub}, $sql, %o);
	return $out if $ok;
	$r->flunk('runner', 'publisher query', "$err\n$sql") unless $o{allow_error};
	return undef;
}

sub sub_sql
{
	my ($r, $sql, %o) = @_;
	my ($ok, $out, $err) = $r->try_sql($r->{sub}, $sql, %o);
	return $out if $ok;
	$r->flunk('oracle', 'subscriber query', "$err\n$sql") unless $o{allow_error};
	return undef;
}

# A step's own SQL: an error is a failure in a whole history, a note in a
# shortened one (steps it depended on may be gone).
sub step_sql
{
	my ($r, $sql) = @_;
	my ($ok, $out, $err) = $r->try_sql($r->{pub}, $sql);
	return 1 if $ok;
	$err =~ s/\s+$//;
	$r->flunk('step', "step $r->{n} failed", "$err\n$sql") if $r->{strict};
	$r->note_msg("step $r->{n} failed (tolerated): " . (split /\n/, $err)[0]);
	return 0;
}

# Runs $code, adding its wall time to the phase's total (printed per run).
sub timed
{
	my ($r, $phase, $code) = @_;
	my $t = time();
	my @ret = $code->();
	$r->{time}{$phase} += time() - $t;
	return wantarray ? @ret : $ret[0];
}

sub poll_until
{
	my ($r, $what, $seconds, $check) = @_;
	my $deadline = time() + $seconds;
	while (time() < $deadline)
	{
		return 1 if $check->();
		usleep(100_000);
	}
	return 0;
}

sub status
{
	my ($r) = @_;
	my $out = $r->pub_sql("SELECT state, coalesce(worker_pid, 0), coalesce(last_error, '') FROM replicant.status"
		  . " WHERE pipeline = 'p'");
	my ($state, $pid, $err) = split /\|/, $out, 3;
	return ($state // '', $pid // 0, $err // '');
}

sub sink_script
{
	my ($r, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ReplicantTest::PYTHON, $ORACLE_SINK, @args, ], '>', \$out, '2>', \$err)
	  or $r->flunk('oracle', 'oracle_sink.py ' . $args[0], $err);
	return $out;
}

# ---- the clusters -----------------------------------------------------------------
sub start
{
	my ($r) = @_;
	my $k = ++$runs;
	my $setup = $r->{h}{setup};
	$r->{pub} = ReplicantTest::new_node("pub$k", conf => join("\n",
			'logical_decoding_work_mem = 64kB', "replicant.checkpoint_interval = $setup->{checkpoint_interval}",
			'restart_after_crash = on', 'max_wal_senders = 20', 'wal_sender_timeout = 20s'));
	$r->{sub} = ReplicantTest::new_node("sub$k", conf => join("\n",
			'wal_retrieve_retry_interval = 200ms', 'max_logical_replication_workers = 8',
			'max_sync_workers_per_subscription = 4', 'wal_receiver_timeout = 20s'));
	$r->{sink} = ReplicantTest::start_sink(name => "sink$k", script => $ORACLE_SINK);
	$r->{policy_file} = PostgreSQL::Test::Utils::tempdir("policy$k") . '/policy.json';
	$r->{version} = $r->{pub}->pg_version->major;
	return;
}

sub stop
{
	my ($r) = @_;
	$_->{h}->kill_kill(grace => 1) for @{ $r->{bursts} };
	$r->{bursts} = [];
	$r->{sink}->stop if $r->{sink};
	foreach my $node (grep { defined } @$r{qw(sub pub)})
	{
		eval { $node->teardown_node; $node->clean_node; 1 } or note("stopping a node: $@");
	}
	return;
}

# ---- the policy: what the pipeline's publications deliver ---------------------------------
# From the publisher's catalog (pg_publication_tables, which is what
# PostgreSQL's subscriber is told too): per delivered relation its columns
# and its publications' row filters.  Before 18, generated columns are not
# published whatever attnames says.
sub current_policy
{
	my ($r) = @_;
	my $pubs = join(',', @{ $r->{pubs} });
	my $drop_generated = $r->{version} < 18 ? 'true' : 'false';
	my $out = $r->pub_sql(qq{
SELECT coalesce(json_object_agg(rel, json_build_object('columns', cols, 'filters', filters, 'ident', ident,
                                                       'actions', actions)), '{}')
  FROM (SELECT pt.schemaname || '.' || pt.tablename AS rel,
               (SELECT json_agg(a.attname ORDER BY a.attnum) FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                   AND (a.attname = ANY (min(pt.attnames::text)::name[]) OR min(pt.attnames::text) IS NULL)
                   AND NOT ($drop_generated AND a.attgenerated <> '')) AS cols,
               json_agg(pt.rowfilter ORDER BY pt.pubname) AS filters,
               json_agg((SELECT concat_ws(',', CASE WHEN p.pubinsert THEN 'insert' END,
                                          CASE WHEN p.pubupdate THEN 'update' END,
                                          CASE WHEN p.pubdelete THEN 'delete' END,
                                          CASE WHEN p.pubtruncate THEN 'truncate' END)
                           FROM pg_publication p WHERE p.pubname = pt.pubname) ORDER BY pt.pubname) AS actions,
               CASE c.relreplident
                 WHEN 'f' THEN (SELECT json_agg(a.attname) FROM pg_attribute a
                                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
                 WHEN 'n' THEN NULL
                 ELSE (SELECT json_agg(a.attname) FROM pg_index i
                         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                        WHERE i.indrelid = c.oid
                          AND CASE WHEN c.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END)
               END AS ident
          FROM pg_publication_tables pt
          JOIN pg_namespace n ON n.nspname = pt.schemaname
          JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
         WHERE pt.pubname = ANY ('{$pubs}')
         GROUP BY 1, c.oid, c.relreplident) s});
	my $policy = $JSON->decode($out);
	# Without its whole replica identity among the published columns, a
	# table has no key a sink could use (or none at all): a bag of rows.
	foreach my $p (values %$policy)
	{
		my %published = map { $_ => 1 } @{ $p->{columns} // [] };
		$p->{keyless} = (!$p->{ident} || grep { !$published{$_} } @{ $p->{ident} }) ? JSON::PP::true : JSON::PP::false;
	}
	return $policy;
}

sub write_policy
{
	my ($r) = @_;
	open(my $fh, '>', "$r->{policy_file}.tmp") or die "cannot write the policy: $!";
	print $fh $JSON->encode($r->{policy});
	close($fh);
	rename("$r->{policy_file}.tmp", $r->{policy_file}) or die "cannot rename the policy: $!";
	return;
}

# Runs $change (a sub) and records the policy in force after it, with the
# LSN and time range around its commit.
sub policy_change
{
	my ($r, $change) = @_;
	my $lo = $r->pub_sql('SELECT pg_current_wal_insert_lsn() - \'0/0\'::pg_lsn');
	my $t_lo = time();
	my $ok = $change->();
	my $hi = $r->pub_sql('SELECT pg_current_wal_insert_lsn() - \'0/0\'::pg_lsn');
	my $relations = $r->current_policy;
	push @{ $r->{policy}{entries} }, { lo => $lo + 0, hi => $hi + 0, t_lo => $t_lo, t_hi => time(), relations => $relations };
	$r->write_policy;
	# A relation that stops being delivered keeps, at both ends, what it had.
	my $before = $r->{delivered} // {};
	my %change = (added => [], dropped => [], changed => []);
	foreach my $rel (sort keys %$before)
	{
		$r->{frozen}{$rel} = $before->{$rel} unless $relations->{$rel};
		push @{ $change{dropped} }, $rel unless $relations->{$rel};
	}
	foreach my $rel (sort keys %$relations)
	{
		push @{ $change{added} }, $rel unless $before->{$rel};
		push @{ $change{changed} }, $rel
		  if $before->{$rel} && $JSON->encode($before->{$rel}) ne $JSON->encode($relations->{$rel});
	}
	$r->{last_change} = \%change;
	delete $r->{frozen}{$_} for keys %$relations;
	$r->{delivered} = $relations;
	return $ok;
}

# ---- the subscriber ----------------------------------------------------------------
# The subscriber's copy of a delivered relation: a plain table with the
# publisher relation's columns (a generated column as a plain one: the
# subscriber must not compute what it receives), keyed by the replica
# identity when the published columns carry it (else unkeyed: an
# insert-only publication whose list leaves the key out sends no key).
sub sub_table_sql
{
	my ($r, $rel, $columns) = @_;
	my $out = $r->pub_sql(qq{
SELECT json_build_object(
  'cols', (SELECT json_agg(json_build_array(attname, format_type(atttypid, atttypmod)) ORDER BY attnum)
             FROM pg_attribute WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped),
  'ident', c.relreplident,
  'key', (SELECT json_agg(a.attname ORDER BY array_position(i.indkey::int2[], a.attnum))
            FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
           WHERE i.indrelid = c.oid
             AND CASE WHEN c.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END))
  FROM pg_class c WHERE c.oid = '$rel'::regclass});
	my $d = $JSON->decode($out);
	my %published = map { $_ => 1 } @$columns;
	my @defs = map { OracleGen::qi($_->[0]) . ' ' . $_->[1] } @{ $d->{cols} };
	my @key = @{ $d->{key} // [] };
	if ($d->{ident} ne 'f' && $d->{ident} ne 'n' && @key && !grep { !$published{$_} } @key)
	{
		push @defs, 'PRIMARY KEY (' . join(', ', map { OracleGen::qi($_) } @key) . ')';
	}
	return "DROP TABLE IF EXISTS $rel;\nCREATE TABLE $rel (" . join(', ', @defs) . ");\n";
}

sub connstr { my ($r) = @_; return $r->{pub}->connstr . ' dbname=postgres'; }

# Makes the subscription anew: its tables are re-created empty and copied
# from the publisher under the publications as they are now.  Relations no
# longer delivered are left as they are (frozen, as at the sink).
sub resubscribe
{
	my ($r) = @_;
	$r->sub_sql('DROP SUBSCRIPTION IF EXISTS osub') if $r->{subscribed};
	my $ddl = '';
	$ddl .= $r->sub_table_sql($_, $r->{delivered}{$_}{columns}) for sort keys %{ $r->{delivered} };
	$r->sub_sql($ddl) if $ddl;
	my $pubs = join(', ', @{ $r->{pubs} });
	$r->sub_sql("CREATE SUBSCRIPTION osub CONNECTION '" . $r->connstr . "' PUBLICATION $pubs WITH (copy_data = true)");
	$r->{subscribed} = 1;
	return;
}

sub subscriber_caught_up
{
	my ($r) = @_;
	$r->poll_until('table sync', 300, sub {
			my $out = $r->sub_sql("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')",
				allow_error => 1);
			return defined $out && $out eq '0';
		}) or $r->flunk('oracle', 'subscriber table sync', $r->sub_log_errors);
	my $target = $r->pub_sql('SELECT pg_current_wal_lsn()');
	$r->poll_until('subscriber', 300, sub {
			my $out = $r->pub_sql("SELECT coalesce(bool_and(replay_lsn >= '$target'), false) FROM pg_stat_replication"
				  . " WHERE application_name = 'osub'", allow_error => 1);
			return defined $out && $out eq 't';
		}) or $r->flunk('oracle', 'subscriber caught up', $r->sub_log_errors);
	return;
}

sub sub_log_errors
{
	my ($r) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($r->{sub}->logfile);
	my @errors = grep { /ERROR/ } split /\n/, $log;
	return join("\n", @errors[ ($#errors > 5 ? $#errors - 5 : 0) .. $#errors ]);
}

# ---- the sink's hands --------------------------------------------------------------
sub sink_admin { my ($r, @args) = @_; $r->sink_script('admin', '--db', $r->{sink}{db}, @args); return; }

# ---- quiet points -----------------------------------------------------------------
sub finish_bursts
{
	my ($r) = @_;
	foreach my $b (@{ $r->{bursts} })
	{
		$b->{h}->finish;
		$r->note_msg("burst on $b->{table} ended with status $?: " . join(' ', grep { /error|abort/i } split /\n/, ${ $b->{err} }))
		  if $? && !$r->{quiet};
	}
	$r->{bursts} = [];
	return;
}

sub running_backfills
{
	my ($r) = @_;
	return $r->pub_sql("SELECT count(*) FROM replicant.backfill_status WHERE pipeline = 'p'"
		  . " AND state IN ('planned', 'running')");
}

# A halt is expected when a step registered it (a renamed or dropped
# column: the contract halts until resume_pipeline; a 413 for a single
# transaction while the sink refuses large bodies); the operator's answer
# is resume_pipeline (the hands at the sink were given when the step ran).
# Any other halt fails the run.  Every last_error must be value-free.
sub handle_halt
{
	my ($r, $reason) = @_;
	my ($i) = grep { $reason =~ $r->{expect}[$_]{pattern} } 0 .. $#{ $r->{expect} };
	if (!defined $i)
	{
		(my $class = $reason) =~ s/\b\d+\b|[0-9A-F]+\/[0-9A-F]+/N/g;
		$r->flunk('halt', substr($class, 0, 100), $reason);
	}
	my $e = $r->{expect}[$i];
	splice(@{ $r->{expect} }, $i, 1) if --$e->{count} <= 0;
	$r->note_msg("expected halt: $reason; resuming");
	$r->pub_sql("SELECT replicant.resume_pipeline('p')");
	return;
}

sub check_value_free
{
	my ($r, $text, $where) = @_;
	$r->flunk('invariant', "value in $where", $text) if $text =~ /ORCLV/;
	return;
}

# Writers stopped, backfills done, the pipeline delivered everything up to
# now (and halts answered as an operator would), faults cleared.
sub quiesce
{
	my ($r) = @_;
	$r->finish_bursts;
	$r->sink_clear;
	my $deadline = time() + 300;
	my $target;
	while (1)
	{
		my ($st, $pid, $err) = $r->status;
		$r->check_value_free($err, 'last_error') if $err;
		if ($st eq 'halted')
		{
			$r->handle_halt($err);
			next;
		}
		if ($st eq 'disabled')    # disabled by a step (or halted and resumed while disabled)
		{
			$r->pub_sql("SELECT replicant.enable_pipeline('p')");
			next;
		}
		$r->flunk('stuck', "pipeline $st", $err) if time() > $deadline;
		if ($r->running_backfills > 0)
		{
			usleep(200_000);
			next;
		}
		$target //= $r->pub_sql('SELECT pg_current_wal_lsn()');
		my ($ok, $out, $e) = $r->try_sql($r->{pub}, "SELECT replicant.await_delivered('p', '$target', 3000)");
		last if $ok && $out eq 't';
	}
	my $failed = $r->pub_sql("SELECT string_agg(relation::text, ', ') FROM replicant.backfill_status"
		  . " WHERE pipeline = 'p' AND state = 'failed'");
	$r->flunk('backfill failed', $failed) if $failed;
	return;
}

# The invariants of every batch since the last look (oracle_sink.py check).
sub check_batches
{
	my ($r) = @_;
	my $out = $r->sink_script('check', '--db', $r->{sink}{db}, '--policy', $r->{policy_file}, '--after', $r->{checked});
	my $res = $JSON->decode($out);
	$r->{checked} = $res->{last};
	if (@{ $res->{violations} })
	{
		my $v = $res->{violations}[0];
		$r->flunk('invariant', $v->{what} . (defined $v->{table} ? " ($v->{table})" : ''),
			join("\n", map { $JSON->encode($_) } @{ $res->{violations} }[ 0 .. ($#{ $res->{violations} } > 4 ? 4 : $#{ $res->{violations} }) ]));
	}
	foreach my $line (split /\n/, $r->sink_script('requests', '--db', $r->{sink}{db}, '--after', $r->{requests_seen}))
	{
		my ($seq, $kind, $redelivered) = split /\t/, $line;
		$r->{requests_seen} = $seq;
		$r->{redelivered}++ if $kind eq 'changes' && $redelivered;
	}
	# At most one re-delivered batch per crash, with a checkpoint after every request.
	if ($r->{h}{setup}{checkpoint_interval} == 0)
	{
		my $crashes = $r->crashes_logged + $r->{sink_crashes};
		$r->flunk('invariant', 'raw duplicates', "$r->{redelivered} re-delivered batches, $crashes crashes")
		  if $r->{redelivered} > $crashes;
	}
	return;
}

sub crashes_logged
{
	my ($r) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($r->{pub}->logfile);
	my $n = () = $log =~ /replicant: fault point "[a-z_]+" reached, exiting|was terminated by signal 9|received immediate shutdown request/g;
	return $n;
}

# Crashes nobody injected, and row values in replicant's log lines.
sub check_log
{
	my ($r) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($r->{pub}->logfile);
	if ($log =~ /(.*(?:was terminated by signal (?!9\b)\d+|terminated by exception|PANIC:).*)/)
	{
		$r->flunk('crash', 'server process crashed', $1);
	}
	foreach my $line (split /\n/, $log)
	{
		$r->flunk('invariant', 'value in the server log', $line) if $line =~ /ORCLV/ && $line =~ /replicant (pipeline|snapshot|sync|launcher)/;
	}
	return;
}

# Lines "schema.table<TAB>row" grouped into a hash of sorted lines.
sub by_relation
{
	my ($text) = @_;
	my %rows;
	foreach my $line (split /\n/, $text)
	{
		my ($rel, $row) = split /\t/, $line, 2;
		$rows{$rel} .= "$row\n";
	}
	return \%rows;
}

# The subscriber's rows of the relations, on their published columns.
sub sub_rows
{
	my ($r, $rels) = @_;
	my @parts = map {
		"SELECT '$_' || E'\\t' || replicant._encode_row(t)::text FROM (SELECT "
		  . join(', ', map { OracleGen::qi($_) } @{ $rels->{$_}{columns} }) . " FROM $_) t"
	} sort keys %$rels;
	return {} unless @parts;
	my $out = $r->sub_sql(join("\nUNION ALL ", @parts));
	my ($canon, $err) = ('', '');
	IPC::Run::run([ $ReplicantTest::PYTHON, $ORACLE_SINK, 'canon-tagged' ], '<', \$out, '>', \$canon, '2>', \$err)
	  or $r->flunk('oracle', 'canon-tagged', $err);
	return by_relation($canon);
}

sub diff_lines
{
	my ($a, $b) = @_;
	my %in_b;
	$in_b{$_}++ for split /\n/, $b;
	my (@only_a, @only_b);
	foreach (split /\n/, $a)
	{
		if ($in_b{$_}) { $in_b{$_}--; } else { push @only_a, $_; }
	}
	@only_b = grep { $in_b{$_}-- > 0 } split /\n/, $b;
	my $cut = sub { my @l = @_; return @l > 4 ? (@l[ 0 .. 3 ], '... ' . (@l - 4) . ' more') : @l; };
	return join("\n", 'subscriber only:', map({ "  " . substr($_, 0, 400) } $cut->(@only_a)),
		'sink only:', map({ "  " . substr($_, 0, 400) } $cut->(@only_b)));
}

sub compare
{
	my ($r, $label) = @_;
	$r->timed(quiesce => sub { $r->quiesce });
	$r->timed(subscriber => sub { $r->subscriber_caught_up });
	$r->timed(checks => sub { $r->check_batches; $r->check_log });
	my $t_rows = time();
	my %rels = (%{ $r->{frozen} }, %{ $r->{delivered} });
	my $present = $r->sub_sql("SELECT string_agg(n.nspname || '.' || c.relname, ' ') FROM pg_class c"
		  . " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('public', 's2', 's3') AND c.relkind = 'r'");
	my %present = map { $_ => 1 } split / /, $present;
	delete $rels{$_} for grep { !$present{$_} } keys %rels;
	my $subs = $r->sub_rows(\%rels);
	my $sinks = by_relation($r->sink_script('dump-all', '--db', $r->{sink}{db}));
	my $n = 0;
	foreach my $rel (sort keys %rels)
	{
		my ($sub, $sink) = ($subs->{$rel} // '', $sinks->{$rel} // '');
		# A table without a key: replicant delivers each row at least once
		# (a backfill reads rows the sink has, a chunk and the stream can both
		# bring an insert), and a sink cannot tell copies apart.
		if ($rels{$rel}{keyless})
		{
			my $uniq = sub { my %seen; return join('', map { "$_\n" } grep { !$seen{$_}++ } split /\n/, $_[0]); };
			($sub, $sink) = ($uniq->($sub), $uniq->($sink));
		}
		if ($sub ne $sink)
		{
			my $dir = "$PostgreSQL::Test::Utils::tmp_check/oracle/mismatch-" . ($r->{label} =~ s/\W+/-/gr) . "-$rel";
			File::Path::make_path($dir);
			unlink("$dir/subscriber", "$dir/sink");
			PostgreSQL::Test::Utils::append_to_file("$dir/subscriber", $sub);
			PostgreSQL::Test::Utils::append_to_file("$dir/sink", $sink);
			$r->flunk('mismatch', $rel, diff_lines($sub, $sink) . "\n(both in $dir)");
		}
		$n += ($sub =~ tr/\n//);
	}
	$r->{time}{rows} += time() - $t_rows;
	push @{ $r->{policy}{quiet} }, time();
	$r->write_policy;
	$r->{compares}++;
	$r->note_msg("compare $label: " . scalar(keys %rels) . " tables, $n rows equal");
	return;
}

# ---- the sink's faults ---------------------------------------------------------------
sub sink_clear
{
	my ($r) = @_;
	if ($r->{sink_down})
	{
		$r->{sink}->restart;
		$r->{sink_down} = 0;
	}
	elsif ($r->{sink_faulty})
	{
		$r->{sink}->control({ clear => 1 });
	}
	$r->{sink_faulty} = 0;
	return;
}

sub sink_fault
{
	my ($r, $s) = @_;
	$r->sink_clear;
	if ($s->{fault} eq 'down')
	{
		# A sink that dies while it answers may have applied the batch.
		$r->{sink}->stop(signal => 'KILL');
		$r->{sink_down} = 1;
		$r->{sink_crashes}++;
		return;
	}
	my %faults = (fail500 => { fail_status => 500, fail_rate => $s->{rate} }, reset => { reset => 1 },
		hang => { hang => 1 }, delay => { delay_ms => 300 }, max_body => { max_body => 16384 });
	$r->{sink}->control($faults{ $s->{fault} });
	$r->{sink_faulty} = 1;
	push @{ $r->{expect} }, { pattern => qr/sink rejected .*HTTP 413/, count => 1 } if $s->{fault} eq 'max_body';
	return;
}

# ---- faults on the server ---------------------------------------------------------------
# PostgreSQL's table synchronization does not survive a publisher crash at
# every point (a sync worker whose slot drop the crash interrupted asks for
# the dropped slot forever): crashes wait until the subscription's tables
# are synchronized.
sub server_fault
{
	my ($r, $s) = @_;
	$r->poll_until('table sync', 300, sub {
			my $out = $r->sub_sql("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')",
				allow_error => 1);
			return defined $out && $out eq '0';
		});
	if ($s->{kind} eq 'immediate')
	{
		$r->{pub}->stop('immediate');
		$r->{pub}->start;
		return;
	}
	if ($s->{kind} eq 'kill9_shard')
	{
		my $pid;
		$r->poll_until('a shard worker', 5, sub {
				$pid = $r->pub_sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'replicant snapshot' LIMIT 1");
				return $pid;
			});
		$r->crash($pid) if $pid;
		return;
	}
	my (undef, $pid) = $r->status;
	return unless $pid > 0;
	if ($s->{kind} eq 'kill9')
	{
		$r->crash($pid);
		return;
	}
	# fault_point: the worker exits at that step of its next delivery
	$r->pub_sql("ALTER SYSTEM SET replicant.fault_point = '$s->{point}'; SELECT pg_reload_conf();");
	$r->step_sql($s->{sql}) if $s->{sql};
	my $died = $r->poll_until('the worker exits', 10, sub { my (undef, $now) = $r->status; return $now != $pid; });
	$r->pub_sql('ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();');
	if ($died)    # the launcher's backoff starts over, as soak.pl does
	{
		$r->pub_sql("SELECT replicant.disable_pipeline('p')");
		$r->poll_until('the worker stops', 30, sub { my (undef, $now) = $r->status; return !$now; });
		$r->pub_sql("SELECT replicant.enable_pipeline('p')");
	}
	return;
}

# Kills a server process, which makes the postmaster end every backend and
# restart.  Returns once the postmaster has reaped it (and so told the
# others to quit), with the kept sessions ended: a step run over one of them
# before its backend got the signal could commit and then lose its
# connection, and be run again.
sub crash
{
	my ($r, $pid) = @_;
	kill('KILL', $pid);
	$r->poll_until('the postmaster reaps it', 30, sub { return !kill(0, $pid); })
	  or $r->flunk('runner', 'crash', "process $pid was not reaped");
	ReplicantTest::Session::forget($r->{pub});
	return;
}

# ---- steps -----------------------------------------------------------------------
sub leaves_of
{
	my ($r, $rel) = @_;
	my $out = $r->pub_sql("SELECT string_agg(relid::regclass::text, ' ' ORDER BY relid::regclass::text)"
		  . " FROM pg_partition_tree('$rel') WHERE isleaf", allow_error => 1);
	return grep { length } split / /, ($out // '');
}

# replicant.backfill refuses a table whose backfill (or initial snapshot)
# is still in progress: waits for it to end.  It ends only once the sink
# accepts its rows and the pipeline runs, so a sink the history took down or
# made fail is restored first, an expected halt resumed and a pipeline a
# step disabled enabled (as an operator would, and as quiesce does), and a
# backfill that does not end even so is a stuck pipeline, said so.  With
# snapshot_over, also waits while the worker starts or snapshots (an
# initial snapshot shows no backfill of the table before its worker planned
# it), and a disabled pipeline is enabled even with nothing running: a
# race needs a worker whose chunk pauses.
sub wait_backfills_of
{
	my ($r, $rel, %opts) = @_;
	my $none_running = sub {
		# A halt a step expected (a column dropped meanwhile) stops the
		# backfill too: the operator's answer, resume_pipeline, lets it end.
		my ($st, $pid, $err) = $r->status;
		$r->check_value_free($err, 'last_error') if $err;
		$r->handle_halt($err) if $st eq 'halted';
		my $running = ($r->pub_sql("SELECT count(*) > 0 FROM replicant.backfill_status WHERE pipeline = 'p'"
				  . " AND relation = '$rel'::regclass AND state IN ('planned', 'running')", allow_error => 1) // 'f') eq 't';
		if ($st eq 'disabled' && ($running || $opts{snapshot_over}))
		{
			$r->pub_sql("SELECT replicant.enable_pipeline('p')");
			return 0;
		}
		return 0 if $opts{snapshot_over} && ($st eq 'starting' || $st eq 'snapshotting');
		return !$running;
	};
	return if $none_running->();
	$r->sink_clear;
	$r->poll_until('a running backfill of the table', 300, $none_running)
	  or $r->flunk('stuck', "a backfill of $rel does not end",
		$r->pub_sql("SELECT string_agg(id || ' ' || state, ', ') FROM replicant.backfill_status"
			  . " WHERE pipeline = 'p' AND relation = '$rel'::regclass", allow_error => 1) // '');
	return;
}

sub start_backfill
{
	my ($r, $rel, $mode, $extra) = @_;
	$r->wait_backfills_of($rel) unless $extra->{fresh};
	my $t_start = time();
	my ($ok, $id, $err) = $r->try_sql($r->{pub}, "SELECT replicant.backfill('p', '$rel'::regclass, '$mode')");
	if (!$ok)
	{
		$r->flunk('step', "backfill of $rel failed", $err) if $r->{strict} && !$extra->{lenient};
		$r->note_msg("backfill of $rel failed (tolerated): " . (split /\n/, $err)[0]);
		return;
	}
	push @{ $r->{extra_backfills} }, $id if $extra->{cancellable};
	$r->{policy}{backfills}{$id} = $t_start;
	$r->write_policy;
	return;
}

# Every delivered relation is read again: emptied at the sink and backfilled
# (partitions of a root one by one, as replicant.backfill takes them),
# emptied at the subscriber and copied by a new subscription.  The runner
# does this after every change of what is published (publications, the
# pipeline's publications, ATTACH/DETACH): neither replicant nor the
# subscriber re-copies rows when a filter, a column list, publish actions
# or the set of tables changes, and rows the two keep from before are not
# comparable (a filter made narrower leaves rows both keep; replicant's
# reference sink upserts an update of a row it never had, the subscriber
# skips it).
#
# When the change only added or dropped tables (and $full is not asked
# for), only the added ones are read again: emptied and backfilled at the
# sink, re-created empty at the subscriber and copied by ALTER SUBSCRIPTION
# ... SET PUBLICATION, which copies the tables new to the subscription and
# drops the ones gone from it (frozen, at both ends).
sub resync
{
	my ($r, @args) = @_;
	$r->timed(resync => sub { $r->resync_now(@args) });
	return;
}

# ($first, $during: $table's backfills start first and $during runs while
# their first chunk waits, as in race_backfill.)
sub resync_now
{
	my ($r, $full, $first, $during) = @_;
	my $change = $r->{last_change};
	$full ||= @{ $change->{changed} } > 0;
	$r->quiesce;
	my @rels = $full ? sort keys %{ $r->{delivered} } : @{ $change->{added} };
	$r->sink_admin('forget', @rels) if @rels;
	if ($full)
	{
		$r->resubscribe;
	}
	else
	{
		my $ddl = join('', map { $r->sub_table_sql($_, $r->{delivered}{$_}{columns}) } @rels);
		$r->sub_sql($ddl) if $ddl;
		$r->sub_sql('ALTER SUBSCRIPTION osub SET PUBLICATION ' . join(', ', @{ $r->{pubs} })
			  . ' WITH (copy_data = true)');
	}
	my $offset = -s $r->{pub}->logfile;
	$r->pub_sql("ALTER SYSTEM SET replicant.fault_point = 'backfill_window:pause'; SELECT pg_reload_conf();")
	  if $during;
	my @leaves = map { my @l = $r->leaves_of($_); @l ? @l : ($_) } @rels;
	if ($first)
	{
		my %firsts = map { $r->rel_name($_) => 1 } ($first, $r->leaves_of($first));
		@leaves = ((grep { $firsts{ $r->rel_name($_) } } @leaves), (grep { !$firsts{ $r->rel_name($_) } } @leaves));
	}
	$r->start_backfill($_, 'auto', { fresh => 1 }) for @leaves;
	if ($during)
	{
		$r->poll_until('the chunk pauses', 15, sub {
				PostgreSQL::Test::Utils::slurp_file($r->{pub}->logfile, $offset)
				  =~ /fault point "backfill_window" reached, pausing/;
			});
		$during->();
		$r->pub_sql('ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();');
	}
	# Both ends read again before the history goes on: a change the
	# publications do not deliver (an unpublished update, delete or
	# truncate, a partition's TRUNCATE under its root) landing between the
	# subscriber's copy and the backfill's read would reach one end only.
	$r->quiesce;
	$r->subscriber_caught_up;
	return;
}

sub do_pub
{
	my ($r, $s) = @_;
	$r->finish_bursts;
	my $change = sub {
		$r->policy_change(sub {
				my $ok = 1;
				$ok = $r->step_sql($s->{sql}) if length($s->{sql} // '');
				if ($s->{pipeline_pubs})
				{
					my $pubs = join(',', @{ $s->{pipeline_pubs} });
					$r->pub_sql("SELECT replicant.alter_pipeline('p', publication => '{$pubs}'::text[])");
					$r->{pubs} = [ @{ $s->{pipeline_pubs} } ];
				}
				return $ok;
			});
	};
	if ($s->{race})
	{
		$r->race_backfill($s->{table}, $change);
	}
	else
	{
		$r->compare("before step $r->{n} ($s->{what})");
		$change->();
	}
	$r->resync;
	return;
}

# A backfill whose first chunk stops for two seconds (fault point
# backfill_window:pause) after its low watermark and snapshot, while a burst
# updates every row of the table once: the rows the chunk reads are stale
# by the time it ends, and the stream's updates inside its window must win.
sub backfill_with_burst
{
	my ($r, $s) = @_;
	my $offset = -s $r->{pub}->logfile;
	$r->pub_sql("ALTER SYSTEM SET replicant.fault_point = 'backfill_window:pause'; SELECT pg_reload_conf();");
	$r->start_backfill($s->{table}, $s->{mode}, { cancellable => 1 });
	$r->do_burst($s->{burst});
	$r->poll_until('the chunk pauses', 15, sub {
			PostgreSQL::Test::Utils::slurp_file($r->{pub}->logfile, $offset)
			  =~ /fault point "backfill_window" reached, pausing/;
		});
	$r->pub_sql('ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();');
	return;
}

# Runs $during while a backfill of $table reads it: the backfill's first
# chunk waits two seconds (fault point backfill_window:pause) after its low
# watermark and snapshot, before it opens the table, and $during runs in
# that pause.  What replicant delivers meanwhile must still fit a policy in
# force during the backfill, and nothing may be lost.
sub race_backfill
{
	my ($r, $table, $during) = @_;
	my $usable = length($table // '') && $r->pub_sql("SELECT to_regclass('$table') IS NOT NULL") eq 't'
	  && $r->updates_published($table);
	my @leaves = $usable ? $r->leaves_of($table) : ();
	@leaves = ($table) if $usable && !@leaves;
	# The race is with a backfill: one of the initial snapshot still
	# reading the table (on a fast machine, early in a history) would refuse
	# it, and the change would race the snapshot instead.
	$r->wait_backfills_of($_, snapshot_over => 1) for @leaves;
	my $offset = -s $r->{pub}->logfile;
	$r->pub_sql("ALTER SYSTEM SET replicant.fault_point = 'backfill_window:pause'; SELECT pg_reload_conf();") if @leaves;
	my $started = 0;
	foreach my $leaf (@leaves)
	{
		my $t_start = time();
		my ($ok, $id) = $r->try_sql($r->{pub}, "SELECT replicant.backfill('p', '$leaf'::regclass, 'auto')");
		$r->{policy}{backfills}{$id} = $t_start if $ok;
		$started ||= $ok;
	}
	$r->write_policy;
	$r->poll_until('the chunk pauses', 15, sub {
			PostgreSQL::Test::Utils::slurp_file($r->{pub}->logfile, $offset)
			  =~ /fault point "backfill_window" reached, pausing/;
		}) if $started;
	$during->();
	$r->pub_sql('ALTER SYSTEM RESET replicant.fault_point; SELECT pg_reload_conf();') if @leaves;
	return;
}

# Relations of the subscriber that hold a table's rows: the table itself
# and, for a partitioned one, its partitions (the subscriber's are plain tables).
sub sub_copies
{
	my ($r, $table) = @_;
	my @rels = ($table, $r->leaves_of($table));
	my %seen;
	return grep { !$seen{$_}++ && $r->sub_sql("SELECT to_regclass('$_') IS NOT NULL") eq 't' } @rels;
}

# The names a table is delivered under (itself, its root, or its partitions).
sub delivered_as
{
	my ($r, $table) = @_;
	my %cands = map { $_ => 1 } ($table, $r->leaves_of($table));
	my $root = $r->pub_sql("SELECT coalesce(pg_partition_root('$table')::text, '')", allow_error => 1) // '';
	$cands{$root} = 1 if $root;
	my @names = map { $r->rel_name($_) } sort keys %cands;
	return grep { $r->{delivered}{$_} || $r->{frozen}{$_} } @names;
}

# Whether the pipeline's publications deliver the table's updates (see
# OracleGen::publishes_updates: otherwise a backfill is not comparable).
sub updates_published
{
	my ($r, $table) = @_;
	foreach my $rel ($r->delivered_as($table))
	{
		my $p = $r->{delivered}{$rel} or next;
		return 1 if grep { ($_ // '') =~ /update/ } @{ $p->{actions} };
	}
	return 0;
}

sub rel_name
{
	my ($r, $rel) = @_;
	return $r->pub_sql("SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
		  . " WHERE c.oid = '$rel'::regclass", allow_error => 1) // $rel;
}

sub columns_of { my ($r, $rel) = @_; my $p = $r->{delivered}{$rel} // $r->{frozen}{$rel}; return $p ? $p->{columns} : undef; }

# DDL is not replicated: the subscriber gets it by hand, in the order that
# keeps its apply worker going (a column is added or widened there first;
# renamed there once everything before was applied; dropped there after the
# publisher dropped it).  The sink gets the hands an operator gives its
# tables: an added column's default in the rows it has not received since,
# a column or table renamed, a dropped column removed.  replicant halts on a
# renamed or dropped column of a delivered table (README, Fail-closed
# halts): that halt is expected and answered with resume_pipeline.
sub do_ddl
{
	my ($r, $s) = @_;
	my $kind = $s->{kind};
	my $table = $s->{table};
	if ($r->pub_sql("SELECT to_regclass('$table') IS NULL") eq 't')
	{
		$r->flunk('step', "step $r->{n}: no table $table", '') if $r->{strict};
		return;
	}
	if ($kind eq 'alter_type')
	{
		my $alter = $s->{sql} =~ s/^ALTER TABLE \S+ //r;
		my $change = sub {
			$r->sub_sql("ALTER TABLE $_ $alter") for $r->sub_copies($table);
			$r->step_sql($s->{sql});
		};
		if ($s->{race})
		{
			# A rewrite while the table is read again from scratch at both
			# ends, asked for while its first chunk holds its snapshot (it
			# waits for the chunk's lock): every row must arrive (0.2.0's
			# chunks took their snapshot before their lock, and one that
			# waited for a rewrite read none of the rewritten rows).
			$r->finish_bursts;
			$r->compare("before step $r->{n} (ALTER TYPE during a backfill)");
			$r->resync(1, $table, $change);
		}
		else
		{
			$change->();
		}
		return;
	}
	$r->finish_bursts;
	$r->quiesce;
	$r->subscriber_caught_up;
	my @delivered = $r->delivered_as($table);
	my @copies = $r->sub_copies($table);
	if ($kind eq 'add_column')
	{
		my $alter = $s->{sql} =~ s/^ALTER TABLE \S+ //r;
		$r->sub_sql("ALTER TABLE $_ $alter") for @copies;
		$r->policy_change(sub { $r->step_sql($s->{sql}) }) or return;
		my $default = $r->added_default($table, $s->{column});
		foreach my $rel (@delivered)
		{
			next unless grep { $_ eq $s->{column} } @{ $r->columns_of($rel) // [] };
			$r->sink_admin('add-column', $rel, $s->{column}, $default);
		}
		return;
	}
	if ($kind eq 'rename_column')
	{
		$r->sub_sql("ALTER TABLE $_ RENAME COLUMN " . OracleGen::qi($s->{column}) . ' TO ' . OracleGen::qi($s->{to}))
		  for @copies;
		my @renamed = grep { my $rel = $_; grep { $_ eq $s->{column} } @{ $r->columns_of($rel) // [] } } @delivered;
		$r->sink_admin('rename-column', $_, $s->{column}, $s->{to}) for @renamed;
		foreach my $rel (grep { $r->{frozen}{$_} } @renamed)
		{
			$r->{frozen}{$rel}{columns} = [ map { $_ eq $s->{column} ? $s->{to} : $_ } @{ $r->{frozen}{$rel}{columns} } ];
		}
		$r->policy_change(sub { $r->step_sql($s->{sql}) }) or return;
		$r->expect_shape_halts($table, $s->{column}, scalar(@delivered));
		return;
	}
	if ($kind eq 'drop_column')
	{
		$r->policy_change(sub { $r->step_sql($s->{sql}) }) or return;
		$r->subscriber_caught_up;
		$r->sub_sql("ALTER TABLE $_ DROP COLUMN " . OracleGen::qi($s->{column})) for @copies;
		$r->sink_admin('drop-column', $_, $s->{column}) for @delivered;
		foreach my $rel (grep { $r->{frozen}{$_} } @delivered)
		{
			$r->{frozen}{$rel}{columns} = [ grep { $_ ne $s->{column} } @{ $r->{frozen}{$rel}{columns} } ];
		}
		$r->expect_shape_halts($table, $s->{column}, scalar(@delivered));
		return;
	}
	if ($kind eq 'rename_table')
	{
		my ($schema, $old) = ('public', $table);
		$r->sub_sql("ALTER TABLE $table RENAME TO $s->{to}") if grep { $_ eq $table } @copies;
		foreach my $rel (@delivered)
		{
			next unless $rel eq "public.$table";
			$r->sink_admin('rename-table', $rel, "public.$s->{to}");
			$r->{frozen}{"public.$s->{to}"} = delete $r->{frozen}{$rel} if $r->{frozen}{$rel};
		}
		$r->policy_change(sub { $r->step_sql($s->{sql}) });
		return;
	}
	die "unknown ddl $kind";
}

# replicant compares each partition's shape with the one it last delivered:
# a column renamed or dropped on a partitioned table halts the pipeline once
# per partition (each answered with resume_pipeline), and once for a plain
# table.
sub expect_shape_halts
{
	my ($r, $table, $column, $delivered) = @_;
	my $n = () = $r->leaves_of($table);
	$n = $delivered if $delivered > $n;
	push @{ $r->{expect} },
	  { pattern => qr/column "\Q$column\E" of table "[^"]*" was dropped or renamed/, count => $n || 1 };
	return;
}

# The JSON value an added column has in rows written before it existed.
sub added_default
{
	my ($r, $table, $column) = @_;
	my $expr = $r->pub_sql(qq{SELECT coalesce(pg_get_expr(d.adbin, d.adrelid), 'NULL') || '::' || format_type(a.atttypid, a.atttypmod)
		  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE a.attrelid = '$table'::regclass AND a.attname = '$column'});
	return $r->pub_sql("SELECT replicant._encode_row(x)::json -> '$column' FROM (SELECT $expr AS $column) x");
}

sub do_partition
{
	my ($r, $s) = @_;
	$r->finish_bursts;
	$r->compare("before step $r->{n} ($s->{op} $s->{part})");
	$r->policy_change(sub { $r->step_sql($s->{sql}) });
	# An attached partition's rows reached neither end.
	$r->resync($s->{op} eq 'attach');
	return;
}

sub do_burst
{
	my ($r, $s) = @_;
	$r->pub_sql($s->{reset} // 'SELECT 1');    # (after a crash: once the server takes connections again)
	my $dir = PostgreSQL::Test::Utils::tempdir('burst');
	my $file = "$dir/burst.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $s->{script});
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ $r->{pub}->config_data('--bindir') . '/pgbench', '-n', '-c', '2', '-j', '2', '-t', $s->{transactions},
			"--random-seed=$s->{seed}", '-f', $file, '-h', $r->{pub}->host, '-p', $r->{pub}->port, 'postgres' ],
		'>', \$out, '2>', \$err);
	push @{ $r->{bursts} }, { h => $h, table => $s->{table}, err => \$err };
	return;
}

sub step
{
	my ($r, $s) = @_;
	my $op = $s->{op};
	if ($op eq 'sql') { $r->step_sql($s->{sql}); }
	elsif ($op eq 'burst') { $r->do_burst($s); }
	elsif ($op eq 'backfill')
	{
		my $exists = $r->pub_sql("SELECT to_regclass('$s->{table}') IS NOT NULL") eq 't';
		if ($exists && !$r->updates_published($s->{table}))
		{
			$r->flunk('oracle', "step $r->{n}: backfill of a table whose updates are not published") if $r->{strict};
		}
		elsif ($s->{burst})
		{
			$r->backfill_with_burst($s);
		}
		elsif ($exists || $r->{strict})
		{
			$r->start_backfill($s->{table}, $s->{mode}, { cancellable => 1 });
		}
	}
	elsif ($op eq 'cancel_backfill')
	{
		# Only backfills of the history's own: a resync's must finish.
		my $id = pop @{ $r->{extra_backfills} };
		if ($id)
		{
			my ($ok, $out, $err) = $r->try_sql($r->{pub}, "SELECT replicant.cancel_backfill($id)"
				  . " FROM replicant.backfill_status WHERE id = $id AND state IN ('planned', 'running')");
			# it may have ended between the two
			$r->flunk('runner', 'cancel_backfill', $err) if !$ok && $err !~ /is already (done|cancelled|failed)/;
		}
	}
	elsif ($op eq 'pub') { $r->do_pub($s); }
	elsif ($op eq 'ddl') { $r->do_ddl($s); }
	elsif ($op eq 'attach' || $op eq 'detach') { $r->do_partition($s); }
	elsif ($op eq 'disable') { $r->pub_sql("SELECT replicant.disable_pipeline('p')"); }
	elsif ($op eq 'enable') { $r->pub_sql("SELECT replicant.enable_pipeline('p')"); }
	elsif ($op eq 'alter_pipeline')
	{
		my ($state) = $r->status;
		$r->pub_sql("SELECT replicant.alter_pipeline('p', $s->{options})") unless $state eq 'halted';
	}
	elsif ($op eq 'fault') { $r->server_fault($s); }
	elsif ($op eq 'sink_fault') { $r->sink_fault($s); }
	elsif ($op eq 'sink_clear') { $r->sink_clear; }
	elsif ($op eq 'compare') { $r->compare("at step $r->{n}"); }
	else { die "unknown step $op"; }
	return;
}

sub setup
{
	my ($r) = @_;
	my $setup = $r->{h}{setup};
	$r->pub_sql($setup->{sql});
	$r->sub_sql('CREATE EXTENSION replicant; CREATE SCHEMA s2; CREATE SCHEMA s3;');
	$r->{pubs} = [ @{ $setup->{pipeline_pubs} } ];
	$r->policy_change(sub { 1 });
	$r->{policy}{entries}[0]{lo} = 0;
	$r->{policy}{entries}[0]{t_lo} = 0;
	$r->write_policy;
	$r->resubscribe;
	push @{ $r->{policy}{quiet} }, time();
	my $pubs = join(',', @{ $r->{pubs} });
	$r->pub_sql("SELECT replicant.create_pipeline('p', '{$pubs}'::text[], '$r->{sink}{url}',"
		  . " snapshot => '$setup->{snapshot}', snapshot_workers => $setup->{snapshot_workers}, $setup->{options})");
	return;
}

sub run
{
	my ($r) = @_;
	my $steps = $r->{h}{steps};
	eval {
		$r->start;
		$r->setup;
		foreach my $i (0 .. $#$steps)
		{
			$r->{n} = $i + 1;
			my $t = time();
			$r->step($steps->[$i]);
			$r->{time}{"step $steps->[$i]{op}"} += time() - $t;
		}
		$r->{n} = scalar(@$steps) + 1;
		$r->compare('at the end') unless @$steps && $steps->[-1]{op} eq 'compare';
		1;
	} or do {
		my $err = $@;
		$r->{failure} //= { kind => 'runner', where => 'died', detail => $err, step => $r->{n} };
	};
	$r->{seconds} = time() - $r->{started};
	# A mutant build says so in the server log (src/fault.h).
	$r->{mutant_active} = $r->{mutant} && $r->{pub}
	  && PostgreSQL::Test::Utils::slurp_file($r->{pub}->logfile) =~ /replicant: mutant "\Q$r->{mutant}\E" active/;
	$r->note_msg('time: ' . join(', ', map { sprintf('%s %.1fs', $_, $r->{time}{$_}) }
			  sort { $r->{time}{$b} <=> $r->{time}{$a} } keys %{ $r->{time} }));
	if ($r->{failure} && !$r->{quiet} && $r->{sink})
	{
		# What a post-mortem needs: the sink's store (every request it
		# accepted) and the policy the checks used.
		my $dir = "$PostgreSQL::Test::Utils::tmp_check/oracle/" . ($r->{label} =~ s/\W+/-/gr);
		File::Path::make_path($dir);
		File::Copy::copy("$r->{sink}{db}$_", "$dir/sink.db$_") for grep { -e "$r->{sink}{db}$_" } ('', '-wal');
		File::Copy::copy($r->{policy_file}, "$dir/policy.json");
		$r->{failure}{kept} = $dir;
	}
	eval { $r->stop; 1 } or note("stopping: $@");
	return $r->result;
}

sub result
{
	my ($r) = @_;
	my $f = $r->{failure};
	return {
		ok => !$f, failure => $f, signature => $f ? "$f->{kind}: $f->{where}" : '',
		steps => scalar(@{ $r->{h}{steps} }), compares => $r->{compares}, seconds => $r->{seconds},
		redelivered => $r->{redelivered}, notes => $r->{notes}, mutant_active => $r->{mutant_active},
	};
}

sub run_history
{
	my ($history, %opts) = @_;
	return Oracle->new($history, %opts)->run;
}

# ---- shrinking ---------------------------------------------------------------------
# Drops steps while the history still fails the same way (same kind and
# place): first everything after the failing step, then chunks of halving
# size (ddmin), within a time budget.  Returns the shortest failing history.
sub shrink
{
	my ($history, $result, %opts) = @_;
	my $deadline = time() + ($opts{seconds} // 1800);
	my $signature = $result->{signature};
	my @steps = @{ $history->{steps} };
	my $last = ($result->{failure}{step} // scalar(@steps)) - 1;
	@steps = @steps[ 0 .. ($last < $#steps ? $last : $#steps) ] if $last >= 0;
	my $tries = 0;
	my $fails = sub {
		my @s = @_;
		$tries++;
		my $res = run_history({ %$history, steps => [@s] }, strict => 0, quiet => 1, mutant => $opts{mutant},
			label => "shrink $tries");
		note("shrink try $tries: " . scalar(@s) . ' steps, ' . ($res->{ok} ? 'passes' : "fails: $res->{signature}"));
		return !$res->{ok} && $res->{signature} eq $signature;
	};
	my $chunk = int(@steps / 2) || 1;
	while ($chunk >= 1 && time() < $deadline)
	{
		my $i = 0;
		while ($i < @steps && time() < $deadline)
		{
			my @candidate = @steps;
			my $n = $i + $chunk > @steps ? @steps - $i : $chunk;
			splice(@candidate, $i, $n);
			# The failing step itself stays (a compare or the step that failed).
			if (@candidate < @steps && @candidate && $candidate[-1] == $steps[-1] && $fails->(@candidate))
			{
				@steps = @candidate;
				next;
			}
			$i += $chunk;
		}
		last if $chunk == 1;
		$chunk = int($chunk / 2) || 1;
	}
	return { %$history, steps => [@steps], shrunk_from => scalar(@{ $history->{steps} }), shrink_tries => $tries };
}

1;
