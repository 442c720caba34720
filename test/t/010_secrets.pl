# Secrets and privileges (docs/internals.md §9, README "Security").
#
# A marker is planted in row values, in a header value and in the signing
# secret; then every path that handles them runs: create_pipeline calls that
# fail validation, a successful one (slot creation logs "logical decoding
# found consistent point", after which PostgreSQL would log the statement),
# alter_pipeline, a sink answering 400 (halt) and 500 (retry), a backfill.
# With default logging settings (log_statement = none, log_min_error_statement
# = error) the marker must appear in no server log line, in no column of any
# replicant view, and in nothing the server returns to the client.
#
# Also: URLs with credentials are refused; an ordinary role can neither run
# the management functions nor read replicant.pipelines; a role granted them
# can create a pipeline but not change another owner's; TLS verification is
# on (a self-signed sink is retried until ca_file names its certificate).
use strict;
use warnings;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $MARK    = 'MARKER-7f3a9c';
my $SECRET  = "$MARK-signing-key";
my $HEADERS = qq('{"Authorization": "Bearer $MARK-header"}');

my $started = time();
# PostgreSQL::Test::Cluster sets log_statement = all, which logs every
# statement by design (README): back to PostgreSQL's default.
my $node = ReplicantTest::new_node('secrets', conf => 'log_statement = none');
my $sink = ReplicantTest::start_sink(secret => $SECRET);
my $url = $sink->{url};

$node->safe_psql('postgres', qq{
CREATE EXTENSION replicant;
CREATE TABLE sec_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION sec_pub FOR TABLE sec_t;
INSERT INTO sec_t SELECT g, '$MARK-row ' || g FROM generate_series(1, 20) g;
});

# ---- helpers ----------------------------------------------------------------

sub poll { return ReplicantTest::poll($node, @_); }

# Server log lines since $offset that show the marker.
sub leaked_log_lines
{
	my ($offset) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
	return grep { /\Q$MARK\E/ } split /\n/, $log;
}

# Runs $sql (which carries the marker); checks the outcome against
# $o{error} (a regex; undef: must succeed) and that neither the server log
# nor anything sent back shows the marker.
sub call
{
	my ($label, $sql, %o) = @_;
	my $offset = -s $node->logfile;
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	if (defined $o{error})
	{
		isnt($ret, 0, "$label: fails");
		like($err, $o{error}, "$label: with the expected error");
	}
	else
	{
		is($ret, 0, "$label: succeeds") or diag($err);
	}
	like(PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset),
		$o{log}, "$label: the server logged it") if $o{log};
	my @leaks = leaked_log_lines($offset);
	is(scalar(@leaks), 0, "$label: no server log line shows the marker")
	  or diag(join("\n", @leaks));
	unlike("$out\n$err", qr/\Q$MARK\E/, "$label: nothing sent to the client shows the marker")
	  or diag($err);
	return ($ret, $out, $err);
}

# Every row of every view in schema replicant, as JSON: no marker.
sub views_clean
{
	my ($label) = @_;
	my @views = split /\n/, $node->safe_psql('postgres',
		"SELECT viewname FROM pg_views WHERE schemaname = 'replicant' ORDER BY 1");
	ok(scalar(grep { $_ eq 'status' } @views) && scalar(grep { $_ eq 'backfill_status' } @views),
		"$label: status and backfill_status are among the views (@views)");
	foreach my $view (@views)
	{
		my $rows = $node->safe_psql('postgres',
			"SELECT coalesce(json_agg(v)::text, '[]') FROM replicant.$view v");
		unlike($rows, qr/\Q$MARK\E/, "$label: no column of replicant.$view shows the marker");
	}
}

sub create_sql
{
	my ($name, %o) = @_;
	my $pub = $o{pub} // 'sec_pub';
	my $u = $o{url} // $url;
	my $extra = $o{extra} // "headers => $HEADERS, secret => '$SECRET'";
	my $fn = $o{unqualified} ? 'create_pipeline' : 'replicant.create_pipeline';
	return "SELECT $fn('$name', '$pub', '$u', http_timeout_ms => 2000,"
	  . " connect_timeout_ms => 500, $extra)";
}

# ---- create_pipeline calls that fail validation, with the secret ---------------
call('bad URL', create_sql('sec', url => 'ftp://127.0.0.1/x'),
	error => qr/sink URL must start with "http:\/\/", "https:\/\/", "nats:\/\/" or "tls:\/\/"/);
call('bad name', create_sql('Sec-1'),
	error => qr/pipeline name contains an invalid character/);
call('missing publication', create_sql('sec', pub => 'no_such_pub'),
	error => qr/publication "no_such_pub" does not exist/);
call('misspelled option',
	create_sql('sec', extra => "headers => $HEADERS, secrte => '$SECRET'"),
	error => qr/function replicant\.create_pipeline\(.*\) does not exist/);
call('inside a transaction block', "BEGIN;\n" . create_sql('sec') . ";\nROLLBACK;",
	error => qr/cannot run inside a transaction block/);
call('secret that is not valid base64',
	create_sql('sec', extra => "secret => 'whsec_!!$MARK'"),
	error => qr/signing secret is not valid base64/);
call('header value with a line break',
	create_sql('sec', extra => qq(headers => '{"Authorization": "Bearer $MARK\\nX: y"}')),
	error => qr/value of header "Authorization" contains a control character/);
call('malformed headers JSON',
	create_sql('sec', extra => qq(headers => '{"Authorization": "Bearer $MARK-header"')),
	error => qr/invalid input syntax for type json/);
call('URL with credentials',
	create_sql('sec', url => "http://user:$MARK\@127.0.0.1:1/ingest"),
	error => qr/sink URL must not contain credentials/);
call('URL with a user name only',
	create_sql('sec', url => "https://$MARK\@127.0.0.1:1/ingest"),
	error => qr/sink URL must not contain credentials/);
is($node->safe_psql('postgres',
		'SELECT (SELECT count(*) FROM replicant.pipelines) + (SELECT count(*) FROM pg_replication_slots)'),
	'0', 'the refused calls left nothing behind');

# The same, called through search_path instead of schema-qualified.
call('unqualified, bad name',
	"SET search_path = replicant, public;\n" . create_sql('Sec-1', unqualified => 1),
	error => qr/pipeline name contains an invalid character/);
call('unqualified, success',
	"SET search_path = replicant, public;\n" . create_sql('unq', unqualified => 1),
	log => qr/logical decoding found consistent point/);
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('unq')");
# ... or through a prepared statement, or a function of the caller's.
call('PREPARE and EXECUTE, bad name',
	"PREPARE mk(text, text) AS SELECT replicant.create_pipeline(\$1, 'sec_pub', '$url', secret => \$2);\n"
	  . "EXECUTE mk('Sec-1', '$SECRET')",
	error => qr/pipeline name contains an invalid character/);
$node->safe_psql('postgres', q{
CREATE FUNCTION setup_pipeline(name text, url text, secret text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM replicant.create_pipeline(name, 'sec_pub', url, secret => secret);
END $$;
});
call('a wrapper function, bad name',
	"SELECT setup_pipeline('Sec-1', '$url', '$SECRET')",
	error => qr/pipeline name contains an invalid character/);

# ---- success: slot creation logs "found consistent point" -----------------------
call('create_pipeline', create_sql('sec'),
	log => qr/logical decoding found consistent point/);
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'sec'", 30),
	'sec: streaming');
$node->safe_psql('postgres',
	"INSERT INTO sec_t SELECT g, '$MARK-row ' || g FROM generate_series(21, 30) g");
# Rows 1-20 predate the pipeline (snapshot 'none'): only 21-30 arrive now.
my $deadline = time() + 60;
my $sunk = 0;
while (time() < $deadline)
{
	$sunk = () = $sink->dump('public.sec_t') =~ /\n/g;
	last if $sunk >= 10;
	usleep(100_000);
}
is($sunk, 10, 'sec: the rows committed after create_pipeline arrive, signed with the secret')
  or diag(explain $sink->stats);
is($sink->stats->{bad_signatures}, 0, 'sec: no bad signature');

call('alter_pipeline with the secret and headers',
	"SELECT replicant.alter_pipeline('sec', secret => '$SECRET', headers => $HEADERS,"
	  . " batch_max_transactions => 5)");
call('add_destination that fails validation, with the secret and headers',
	"SELECT replicant.add_destination('sec', 'second', '$url', secret => '$SECRET',"
	  . " headers => $HEADERS, snapshot => 'initial')",
	error => qr/an added destination cannot take snapshot "initial"/);
call('add_destination with a bad name, with the secret',
	"SELECT replicant.add_destination('sec', 'Second-1', '$url', secret => '$SECRET')",
	error => qr/destination name contains an invalid character/);
call('alter_pipeline that fails validation',
	"SELECT replicant.alter_pipeline('sec', secret => '$SECRET', batch_max_bytes => 1)",
	error => qr/batch_max_bytes must be between/);
call('alter_pipeline to a URL with credentials',
	"SELECT replicant.alter_pipeline('sec', sink_url => 'http://u:$MARK\@127.0.0.1:1/x')",
	error => qr/sink URL must not contain credentials/);
is($node->safe_psql('postgres', "SELECT sink_url FROM replicant.status WHERE pipeline = 'sec'"),
	$url, 'the refused alter left the URL as it was');
is($node->safe_psql('postgres', "SELECT replicant._redact_url('http://u:p\@h:1/x?q=1')"),
	'http://***@h:1/x?q=1', 'the views redact URL credentials');

# A backfill: rows in backfill_status.
$node->safe_psql('postgres', "SELECT replicant.backfill('sec', 'sec_t')");
ok(poll("SELECT bool_and(state = 'done') FROM replicant.backfill_status WHERE pipeline = 'sec'", 60),
	'backfill done');
views_clean('streaming, after a backfill');

# ---- the sink answers 500 (retry), then 400 (halt) --------------------------------
{
	my $offset = -s $node->logfile;
	$sink->control({ clear => 1, fail_status => 500 });
	$node->safe_psql('postgres', "INSERT INTO sec_t VALUES (100, '$MARK-row 100')");
	ok(poll("SELECT state = 'retrying' AND retries >= 2 FROM replicant.status WHERE pipeline = 'sec'", 30),
		'500: retrying');
	views_clean('500');
	$sink->control({ clear => 1, fail_status => 400 });
	ok(poll("SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'sec'", 60),
		'400: halted');
	like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'sec'"),
		qr/^sink rejected batch.*HTTP 400/, '400: last_error says why');
	views_clean('400');
	$sink->control({ clear => 1 });
	call('resume_pipeline', "SELECT replicant.resume_pipeline('sec')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $sink, ['sec_t'], 60),
		'resumed: delivered');
	my @leaks = leaked_log_lines($offset);
	is(scalar(@leaks), 0, 'retries, halt and resume: no server log line shows the marker')
	  or diag(join("\n", @leaks));
}

# ---- privileges ------------------------------------------------------------------
$node->safe_psql('postgres', q{
CREATE ROLE nousage LOGIN;
CREATE ROLE plain LOGIN;
GRANT USAGE ON SCHEMA replicant TO plain;
CREATE ROLE maker LOGIN;
CREATE ROLE other LOGIN;
GRANT USAGE ON SCHEMA replicant TO maker, other;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO maker, other;
GRANT SELECT ON sec_t TO maker, other;
});
my %calls = (
	create_pipeline => "replicant.create_pipeline('x', 'sec_pub', 'http://127.0.0.1:1/')",
	alter_pipeline  => "replicant.alter_pipeline('sec', batch_max_transactions => 7)",
	add_destination  => "replicant.add_destination('sec', 'second', 'http://127.0.0.1:1/')",
	drop_destination => "replicant.drop_destination('sec', 'default')",
	enable_pipeline  => "replicant.enable_pipeline('sec')",
	disable_pipeline => "replicant.disable_pipeline('sec')",
	resume_pipeline  => "replicant.resume_pipeline('sec')",
	drop_pipeline    => "replicant.drop_pipeline('sec')",
	backfill         => "replicant.backfill('sec', 'sec_t')",
	cancel_backfill  => 'replicant.cancel_backfill(1)',
	await_delivered  => "replicant.await_delivered('sec')");
foreach my $fn (sort keys %calls)
{
	my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE nousage;\nSELECT $calls{$fn}");
	like($err, qr/permission denied for schema replicant/, "a role without USAGE cannot call $fn");
	($ret, $out, $err) = $node->psql('postgres', "SET ROLE plain;\nSELECT $calls{$fn}");
	like($err, qr/permission denied for function $fn/, "a role without EXECUTE cannot call $fn");
}
foreach my $table ('pipelines', 'checkpoints', 'backfills')
{
	foreach my $role ('plain', 'maker')
	{
		my ($ret, $out, $err) = $node->psql('postgres',
			"SET ROLE $role;\nSELECT * FROM replicant.$table");
		like($err, qr/permission denied for table $table/, "$role cannot read replicant.$table");
	}
}
is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.pipelines WHERE name <> 'sec'"),
	'0', 'the refused calls created nothing');

call('a role granted EXECUTE and USAGE creates a pipeline',
	"SET ROLE maker;\n" . create_sql('makers'));
is($node->safe_psql('postgres', "SELECT pg_get_userbyid(owner) FROM replicant.pipelines WHERE name = 'makers'"),
	'maker', 'owned by that role');
ok(poll("SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'makers'", 30),
	'makers: streaming');
foreach my $fn (qw(alter_pipeline add_destination drop_destination enable_pipeline disable_pipeline
	resume_pipeline drop_pipeline backfill await_delivered))
{
	(my $sql = $calls{$fn}) =~ s/'sec'/'makers'/;
	my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE other;\nSELECT $sql");
	like($err, qr/must be owner of pipeline "makers"/, "another role cannot $fn the pipeline");
	($ret, $out, $err) = $node->psql('postgres', "SET ROLE maker;\nSELECT $calls{$fn}");
	like($err, qr/must be owner of pipeline "sec"/, "nor can the pipeline's owner $fn a superuser's");
}
is($node->safe_psql('postgres', "SELECT state FROM replicant.status WHERE pipeline = 'makers'"),
	'streaming', 'makers: untouched');
$node->safe_psql('postgres', "SET ROLE maker;\nSELECT replicant.drop_pipeline('makers')");
my $makers_slot = ReplicantTest::slot_name($node, 'postgres', 'makers');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$makers_slot'"),
	'0', 'the owner drops its pipeline');

# ---- TLS: verification on; ca_file trusts a self-signed sink -----------------------
SKIP:
{
	my ($openssl) = map { "$_/openssl" } grep { -x "$_/openssl" } split /:/, $ENV{PATH};
	skip 'openssl is not installed (apt-get install openssl)', 6 unless $openssl;
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
	my $https = ReplicantTest::start_sink(name => 'https',
		tls_cert => "$dir/cert.pem", tls_key => "$dir/key.pem");
	like($https->{url}, qr{^https://127\.0\.0\.1:\d+/ingest$}, 'TLS: the sink serves https');
	$node->safe_psql('postgres', q{
CREATE TABLE tls_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION tls_pub FOR TABLE tls_t;
});
	$node->safe_psql('postgres',
		"SELECT replicant.create_pipeline('tls', 'tls_pub', '$https->{url}',"
		  . " http_timeout_ms => 2000, connect_timeout_ms => 500)");
	$node->safe_psql('postgres', "INSERT INTO tls_t VALUES (1, 'a')");
	ok( poll("SELECT state = 'retrying' AND retries >= 2"
			  . " AND last_error = 'sink unavailable: could not verify the sink''s TLS certificate'"
			  . " FROM replicant.status WHERE pipeline = 'tls'", 30),
		'TLS: a self-signed sink is not trusted: retrying, last_error says why')
	  or diag($node->safe_psql('postgres', "SELECT state, last_error FROM replicant.status WHERE pipeline = 'tls'"));
	is($https->stats->{requests}, 0, 'TLS: nothing reached the sink');

	$node->safe_psql('postgres',
		"SELECT replicant.alter_pipeline('tls', ca_file => '$dir/cert.pem')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $https, ['tls_t'], 60),
		'TLS: with ca_file naming the certificate, delivered');

	# The certificate is for 127.0.0.1: another name for the host is refused.
	$node->safe_psql('postgres',
		"SELECT replicant.alter_pipeline('tls', sink_url => 'https://localhost:$https->{port}/ingest')");
	$node->safe_psql('postgres', "INSERT INTO tls_t VALUES (2, 'b')");
	ok( poll("SELECT state = 'retrying'"
			  . " AND last_error = 'sink unavailable: could not verify the sink''s TLS certificate'"
			  . " FROM replicant.status WHERE pipeline = 'tls'", 30),
		'TLS: the host name is verified too')
	  or diag($node->safe_psql('postgres', "SELECT state, last_error FROM replicant.status WHERE pipeline = 'tls'"));
	$node->safe_psql('postgres',
		"SELECT replicant.alter_pipeline('tls', sink_url => '$https->{url}')");
	ok(ReplicantTest::wait_until_synced($node, 'postgres', $https, ['tls_t'], 60),
		'TLS: back to 127.0.0.1, delivered');
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('tls')");
}

# ---- default privileges of the installing role --------------------------------------
# A common reporting setup, made long before replicant: every new table and
# function of the installing role is granted to "mon", a pg_monitor member;
# 0.3.0 gives pg_monitor USAGE on the schema.  Nobody but the owner keeps a
# privilege on replicant's tables or sequences (pipelines holds secrets),
# nor a grant of a function nobody granted it, at installation or update.
# A hardened default (no EXECUTE for PUBLIC) leaves status readable.
$node->safe_psql('postgres', q{
CREATE ROLE mon LOGIN;
GRANT pg_monitor TO mon;
CREATE ROLE watcher LOGIN;
GRANT replicant_admin TO watcher;
CREATE ROLE reporting LOGIN;
CREATE DATABASE defpriv;
CREATE DATABASE defpriv_old;
});
foreach my $db ('defpriv', 'defpriv_old')
{
	$node->safe_psql($db, q{
ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO mon, reporting;
ALTER DEFAULT PRIVILEGES GRANT USAGE, SELECT ON SEQUENCES TO mon;
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO mon;
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
CREATE TABLE t (id int PRIMARY KEY);
CREATE PUBLICATION p FOR TABLE t;
GRANT SELECT ON t TO watcher;
});
}
$node->safe_psql('defpriv', 'CREATE EXTENSION replicant');
$node->safe_psql('defpriv_old', "CREATE EXTENSION replicant VERSION '0.2.0'");
$node->safe_psql('defpriv_old', 'ALTER EXTENSION replicant UPDATE');
foreach my $db ('defpriv', 'defpriv_old')
{
	my $label = $db eq 'defpriv' ? 'installed' : 'updated';
	$node->safe_psql($db,
		"SELECT replicant.create_pipeline('sec', 'p', 'http://127.0.0.1:9/', secret => '$SECRET',"
		  . " headers => $HEADERS, enabled => false)");
	my ($ret, $out, $err) = $node->psql($db, 'SET ROLE mon; SELECT secret, headers FROM replicant.destinations');
	unlike($out, qr/\Q$MARK\E/, "default_privileges_global ($label): a pg_monitor member cannot read pipeline secrets");
	like($err, qr/permission denied for table destinations/, "... permission denied ($label)");
	is($node->safe_psql($db, q{
SELECT count(*) FROM pg_class c
 WHERE c.relnamespace = 'replicant'::regnamespace AND c.relkind IN ('r', 'p', 'S')
   AND (has_table_privilege('mon', c.oid, 'SELECT') OR has_table_privilege('mon', c.oid, 'UPDATE')
        OR has_table_privilege('mon', c.oid, 'INSERT') OR has_any_column_privilege('mon', c.oid, 'SELECT'))}),
		'0', "... nor any privilege on replicant's tables and sequences ($label)");
	# An update keeps the grants of the functions it did not make: they may
	# be an operator's (before replicant_admin, the way to delegate).
	is($node->safe_psql($db,
			"SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p"
			  . " WHERE p.pronamespace = 'replicant'::regnamespace AND has_function_privilege('mon', p.oid, 'EXECUTE')"
			  . "   AND NOT has_function_privilege('public', p.oid, 'EXECUTE')"),
		'', "... nor EXECUTE on a function PUBLIC may not run ($label)")
	  if $db eq 'defpriv';
	# The views keep a default grant (README, Security): "reporting", in no
	# role of replicant's, holds SELECT on status and metrics (it still
	# needs USAGE on the schema to read them); backfill_status and
	# destination_status are PUBLIC's, each gated by a function on the
	# reader's SELECT on status.
	is($node->safe_psql($db,
			"SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_class c"
			  . " WHERE c.relnamespace = 'replicant'::regnamespace"
			  . "   AND has_table_privilege('reporting', c.oid, 'SELECT')"),
		'backfill_status,destination_status,metrics,status',
		"default_privileges_views ($label): a default grantee keeps SELECT on the views, metrics included");
	($ret, $out, $err) = $node->psql($db,
		"SET ROLE watcher; SELECT state, sink_url FROM replicant.status WHERE pipeline = 'sec'");
	is($out, 'disabled|http://127.0.0.1:9', "a replicant_admin member reads status under a default without EXECUTE for PUBLIC ($label)")
	  or diag($err);
	$node->safe_psql($db, "SELECT replicant.drop_pipeline('sec')");
}

# ---- the whole log, once more ------------------------------------------------------
views_clean('at the end');
my @leaks = leaked_log_lines(0);
is(scalar(@leaks), 0, 'no line of the whole server log shows the marker')
  or diag(join("\n", @leaks));

note(sprintf('%.0f s', time() - $started));
done_testing();
