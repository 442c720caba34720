# Privilege boundary (docs/internals.md §9).
#
# A role granted the management functions puts its own schema first on
# search_path, holding operators and functions that shadow the built-in ones
# (=, <>, #>>, +, /, jsonb_typeof, jsonb_each, now, pg_current_wal_lsn, ...)
# and make the role a superuser when they run as one.  It calls every
# management function (on its own pipelines and on a superuser's) and reads
# the views; it also owns a pipeline with the same search_path as a role
# setting, so the worker's queries run under it too.  It must never become a
# superuser.
#
# Bitmap planning reads the table as the pipeline's owner (item 2), and
# messages => true needs REPLICATION or superuser, at create, at alter and
# when the worker starts (item 5).
#
# Planning a backfill runs a table owner's code in the caller's session
#: the function of a partial index's predicate runs
# when the planner samples the key's order or the bitmap ranges.  It runs
# only as a security-restricted operation: a setting it changes does not
# outlive the call, and it cannot create temporary objects that would
# shadow the caller's.
#
# And it runs only as the table's owner: in the
# worker's chunk reads (a domain's CHECK on the cursor's key, a partial
# index's predicate) and in planning, never with the pipeline owner's
# rights; a policy that applies to the pipeline's owner never runs, the
# table refused first; one forced on the table's owner never runs either.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

my $node = ReplicantTest::new_node('search_path');
my $sink = ReplicantTest::start_sink();
my $url = $sink->{url};

$node->safe_psql('postgres', q{
CREATE EXTENSION replicant;
CREATE TABLE sp_t (id int PRIMARY KEY, v text);
CREATE TABLE sp_hidden (id int PRIMARY KEY);
CREATE PUBLICATION sp_pub FOR TABLE sp_t;
CREATE PUBLICATION sp_pub2 FOR TABLE sp_hidden;
INSERT INTO sp_t SELECT g, 'row ' || g FROM generate_series(1, 3000) g;
INSERT INTO sp_hidden SELECT generate_series(1, 3000);
ANALYZE sp_t, sp_hidden;
CREATE ROLE evil LOGIN;
GRANT USAGE ON SCHEMA replicant TO evil;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO evil;
GRANT SELECT ON sp_t TO evil;
GRANT SELECT ON replicant.status, replicant.backfill_status TO evil;
CREATE SCHEMA evil AUTHORIZATION evil;
});

is($node->safe_psql('postgres', q{
SELECT string_agg(p.oid::regprocedure::text, ', ')
  FROM pg_proc p
 WHERE p.pronamespace = 'replicant'::regnamespace
   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)}),
	'', 'every function of the extension pins search_path');

# The shadowing objects, created by evil itself.
my $shadow = q{
CREATE FUNCTION evil.esc() RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    BEGIN
        ALTER ROLE evil SUPERUSER;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
END $$;
};
my @ops = (
	[ '=',   'text',    'text',    'boolean', 'texteq' ],
	[ '=',   'name',    'name',    'boolean', 'nameeq' ],
	[ '=',   'name',    'text',    'boolean', 'nameeqtext' ],
	[ '=',   'text',    'name',    'boolean', 'texteqname' ],
	[ '=',   'oid',     'oid',     'boolean', 'oideq' ],
	[ '=',   'integer', 'integer', 'boolean', 'int4eq' ],
	[ '=',   'bigint',  'bigint',  'boolean', 'int8eq' ],
	[ '=',   'bigint',  'integer', 'boolean', 'int84eq' ],
	[ '<>',  'name',    'name',    'boolean', 'namene' ],
	[ '<>',  'text',    'text',    'boolean', 'textne' ],
	[ '+',   'integer', 'integer', 'integer', 'int4pl' ],
	[ '/',   'double precision', 'bigint', 'double precision', 'float8div_evil' ],
	[ '#>>', 'jsonb',   'text[]',  'text',    'jsonb_extract_path_text_op' ],
	[ '||',  'text',    'text',    'text',    'textcat' ],
	[ '<=',  'pg_lsn',  'pg_lsn',  'boolean', 'pg_lsn_le' ],
	[ '>=',  'pg_lsn',  'pg_lsn',  'boolean', 'pg_lsn_ge' ],
);
my $i = 0;
foreach my $op (@ops)
{
	my ($sym, $l, $r, $ret) = @$op;
	$i++;
	$shadow .= qq{
CREATE FUNCTION evil.op$i(a $l, b $r) RETURNS $ret LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
BEGIN
    PERFORM evil.esc();
    RETURN a OPERATOR(pg_catalog.$sym) b;
END \$\$;
CREATE OPERATOR evil.$sym (LEFTARG = $l, RIGHTARG = $r, FUNCTION = evil.op$i);
};
}
$shadow .= q{
CREATE FUNCTION evil.jsonb_typeof(j jsonb) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN pg_catalog.jsonb_typeof(j); END $$;
CREATE FUNCTION evil.jsonb_each(j jsonb, OUT key text, OUT value jsonb) RETURNS SETOF record
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN QUERY SELECT * FROM pg_catalog.jsonb_each(j); END $$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION evil.pg_current_wal_lsn() RETURNS pg_lsn LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN pg_catalog.pg_current_wal_lsn(); END $$;
CREATE FUNCTION evil.coalesce_me(i int) RETURNS int LANGUAGE sql AS 'SELECT i';
CREATE FUNCTION evil.generate_series(a int, b bigint) RETURNS SETOF bigint
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN QUERY SELECT pg_catalog.generate_series(a::bigint, b); END $$;
CREATE FUNCTION evil.unnest(a text[]) RETURNS SETOF text
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
CREATE FUNCTION evil.array_position(a text[], e text) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN PERFORM evil.esc(); RETURN pg_catalog.array_position(a, e); END $$;
};
my @evil = (extra_params => [ '-U', 'evil' ]);
$node->safe_psql('postgres', $shadow, @evil);
# The trap works: a superuser using the operator makes evil a superuser.
$node->safe_psql('postgres', "SET search_path = evil, pg_catalog;\nSELECT 'a'::text = 'a'::text");
is($node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'evil'"), 't',
	'the shadowing operator, run by a superuser, escalates');
$node->safe_psql('postgres', 'ALTER ROLE evil NOSUPERUSER');

# The worker runs as the pipeline owner: its role setting too.
$node->safe_psql('postgres',
	'ALTER ROLE evil SET search_path = evil, pg_catalog, public');

sub is_superuser
{
	return $node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'evil'");
}

my @escalated;

# Runs $sql as evil under the shadowing search_path; evil must still not be
# a superuser afterwards (each call checked on its own).
sub as_evil
{
	my ($label, $sql, %o) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET search_path = evil, pg_catalog, public;\n$sql", @evil);
	if ($o{error})
	{
		like($err, $o{error}, "$label: fails as expected");
	}
	else
	{
		is($ret, 0, "$label: succeeds") or diag($err);
	}
	my $su = is_superuser();
	is($su, 'f', "$label: the caller is still not a superuser");
	if ($su ne 'f')
	{
		push @escalated, $label;
		$node->safe_psql('postgres', 'ALTER ROLE evil NOSUPERUSER');
	}
	return $out;
}

# A superuser's pipeline, which evil must not manage.
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('su', 'sp_pub', '$url', headers => '{\"X-A\": \"b\"}')");
my $su_backfill = $node->safe_psql('postgres', "SELECT replicant.backfill('su', 'sp_t', 'keyset')");

my $headers = q('{"X-Token": "t", "X-Other": "o"}');
as_evil('create_pipeline (text)',
	"SELECT replicant.create_pipeline('ev1', 'sp_pub', '$url', headers => $headers)");
as_evil('create_pipeline (text[], incremental)',
	"SELECT replicant.create_pipeline('ev2', ARRAY['sp_pub'], '$url', headers => $headers,"
	  . " snapshot => 'incremental')");
as_evil('create_pipeline of an existing name',
	"SELECT replicant.create_pipeline('su', 'sp_pub', '$url')",
	error => qr/already exists/);
as_evil('alter_pipeline',
	"SELECT replicant.alter_pipeline('ev1', headers => $headers, batch_max_transactions => 5,"
	  . " publication => ARRAY['sp_pub'])");
as_evil('resume_pipeline',  "SELECT replicant.resume_pipeline('ev1')");
# Disabled, so the backfill is still planned when it is cancelled.
as_evil('disable_pipeline', "SELECT replicant.disable_pipeline('ev1')");
my $bf = as_evil('backfill (bitmap)', "SELECT replicant.backfill('ev1', 'sp_t', 'bitmap')");
as_evil('backfill (auto)', "SELECT replicant.backfill('ev1', 'sp_t', 'auto')",
	error => qr/already in progress/);
as_evil('cancel_backfill', "SELECT replicant.cancel_backfill($bf)");
as_evil('backfill (keyset)', "SELECT replicant.backfill('ev1', 'sp_t', 'keyset')");
as_evil('enable_pipeline',  "SELECT replicant.enable_pipeline('ev1')");
as_evil('await_delivered', "SELECT replicant.await_delivered('ev1', timeout_ms => 30000)");
as_evil('status view', 'SELECT count(*) FROM replicant.status');
as_evil('backfill_status view', 'SELECT count(*) FROM replicant.backfill_status');

# The superuser's pipeline: refused, and still no escalation.
foreach my $call (
	[ 'alter_pipeline',   "replicant.alter_pipeline('su', batch_max_transactions => 5)" ],
	[ 'disable_pipeline', "replicant.disable_pipeline('su')" ],
	[ 'enable_pipeline',  "replicant.enable_pipeline('su')" ],
	[ 'resume_pipeline',  "replicant.resume_pipeline('su')" ],
	[ 'backfill',         "replicant.backfill('su', 'sp_t')" ],
	[ 'cancel_backfill',  "replicant.cancel_backfill($su_backfill)" ],
	[ 'drop_pipeline',    "replicant.drop_pipeline('su')" ])
{
	as_evil("$call->[0] of a superuser's pipeline", "SELECT $call->[1]",
		error => qr/must be owner of pipeline "su"/);
}
as_evil("await_delivered of a superuser's pipeline",
	"SELECT replicant.await_delivered('su', timeout_ms => 100)",
	error => qr/must be owner of pipeline "su"/);

# The workers of evil's pipelines ran their catalog queries.
$node->safe_psql('postgres', 'INSERT INTO sp_t SELECT generate_series(3001, 3100)');
ok(ReplicantTest::poll($node,
		"SELECT bool_and(state IN ('done', 'cancelled')) FROM replicant.backfill_status WHERE pipeline IN ('ev1', 'ev2')"),
	'the backfills of evil\'s pipelines finished');
ok(ReplicantTest::poll($node,
		"SELECT replicant.await_delivered('ev1', timeout_ms => 1000) AND replicant.await_delivered('ev2', timeout_ms => 1000)"),
	'evil\'s pipelines delivered');
is(is_superuser(), 'f', 'the workers of evil\'s pipelines did not make it a superuser');

as_evil('drop_pipeline', "SELECT replicant.drop_pipeline('ev2')");

# ---- item 2: bitmap planning reads the table as the owner ------------------
# create_pipeline refuses a table its owner cannot read, so the owner loses
# the privilege after creating the pipeline.
as_evil('create_pipeline of a table the owner may not read',
	"SELECT replicant.create_pipeline('ev3', 'sp_pub2', '$url')",
	error => qr/role "evil" cannot read published table "sp_hidden"/);
$node->safe_psql('postgres', 'GRANT SELECT ON sp_hidden TO evil');
as_evil('create_pipeline of a table the owner may read',
	"SELECT replicant.create_pipeline('ev3', 'sp_pub2', '$url')");
$node->safe_psql('postgres', 'REVOKE SELECT ON sp_hidden FROM evil');
as_evil('backfill (bitmap) of a table the owner may not read',
	"SELECT replicant.backfill('ev3', 'sp_hidden', 'bitmap')",
	error => qr/pipeline owner has no SELECT privilege on table "sp_hidden"/);
is($node->safe_psql('postgres',
		"SELECT count(*) FROM replicant.backfill_status WHERE pipeline = 'ev3'"),
	'0', 'no backfill of it was planned');
as_evil('drop_pipeline', "SELECT replicant.drop_pipeline('ev3')");
as_evil('drop_pipeline', "SELECT replicant.drop_pipeline('ev1')");

is(join(', ', @escalated), '', 'no call made the grantee a superuser');

# ---- item 5: messages needs REPLICATION ------------------------------------
$node->safe_psql('postgres', q{
CREATE ROLE repl LOGIN REPLICATION;
GRANT USAGE ON SCHEMA replicant TO repl;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO repl;
GRANT SELECT ON sp_t, sp_hidden TO repl;
});
as_evil('create_pipeline with messages, without REPLICATION',
	"SELECT replicant.create_pipeline('evm', 'sp_pub', '$url', messages => true)",
	error => qr/must have the REPLICATION attribute to receive messages/);
as_evil('create_pipeline without messages', "SELECT replicant.create_pipeline('evm', 'sp_pub', '$url')");
as_evil('alter_pipeline to messages, without REPLICATION',
	"SELECT replicant.alter_pipeline('evm', messages => true)",
	error => qr/must have the REPLICATION attribute to receive messages/);
is($node->safe_psql('postgres', "SELECT messages FROM replicant.pipelines WHERE name = 'evm'"),
	'f', 'the refused alter changed nothing');
as_evil('drop_pipeline', "SELECT replicant.drop_pipeline('evm')");

my @repl = (extra_params => [ '-U', 'repl' ]);
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('rm', 'sp_pub', '$url', messages => true)", @repl);
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'rm'"),
	'a REPLICATION role can create a pipeline with messages');
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(true, 'app', 'one')");
ok(ReplicantTest::poll($node, "SELECT replicant.await_delivered('rm', timeout_ms => 1000)"),
	'its message is delivered');
my $before = scalar(@{ $sink->messages });
ok($before >= 1, 'the sink got the message');

# The attribute goes away: the worker refuses at its next start.
$node->safe_psql('postgres', 'ALTER ROLE repl NOREPLICATION');
$node->safe_psql('postgres', "SELECT replicant.alter_pipeline('rm', batch_max_transactions => 3)", @repl);
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'rm'", 30),
	'without REPLICATION the worker halts at its start');
like($node->safe_psql('postgres', "SELECT last_error FROM replicant.status WHERE pipeline = 'rm'"),
	qr/pipeline owner must have the REPLICATION attribute to receive messages/,
	'last_error says why');
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(true, 'app', 'two')");
$node->safe_psql('postgres', "SELECT replicant.resume_pipeline('rm')", @repl);
ok(ReplicantTest::poll($node, "SELECT state = 'halted' FROM replicant.status WHERE pipeline = 'rm'", 30),
	'a resume without the attribute halts again');
is(scalar(@{ $sink->messages }), $before, 'no message was delivered without REPLICATION');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('rm')");

# ---- a table owner's code during backfill planning ---------
# tabowner's function moves the caller's search_path to its own schema and
# tries to plant a temporary table.  It sits in a partial index's predicate,
# which the planner folds in whatever session plans a query of the table,
# so it runs in whatever session plans a backfill of it (the sample of the
# key's order, the bitmap ranges); here a superuser's.  (It used to sit in a
# row-level security policy; a backfill now refuses a table whose policies
# apply to the pipeline's owner before anything reads it.)
$node->safe_psql('postgres', q{
CREATE ROLE tabowner LOGIN;
CREATE ROLE planner LOGIN;
GRANT USAGE ON SCHEMA replicant TO planner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO planner;
CREATE SCHEMA trap AUTHORIZATION tabowner;
});
$node->safe_psql('postgres', q{
CREATE TABLE trap.owned (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = false);
INSERT INTO trap.owned SELECT g, g FROM generate_series(1, 5000) g;
GRANT USAGE ON SCHEMA trap TO planner;
GRANT SELECT ON trap.owned TO planner;
CREATE FUNCTION trap.looks(id int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'trap, pg_catalog', false);
    BEGIN
        IF pg_catalog.to_regclass('pg_temp.planted') IS NULL THEN
            CREATE TEMP TABLE planted (x int);
        END IF;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    RETURN true;
END $$;
}, extra_params => [ '-U', 'tabowner' ]);
$node->safe_psql('postgres', q{
CREATE FUNCTION trap.always() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN trap.looks(0);
END $$;
CREATE INDEX ON trap.owned (v) WHERE trap.always();
}, extra_params => [ '-U', 'tabowner' ]);
$node->safe_psql('postgres', 'CREATE PUBLICATION trap_pub FOR TABLE trap.owned');
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('planned', 'trap_pub', '$url')", extra_params => [ '-U', 'planner' ]);
# Disabled, so that only planning reads the table.
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('planned')");
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stats WHERE tablename = 'owned'"), '0',
	'the table was never analysed (auto samples its order)');

foreach my $mode ('bitmap', 'auto')
{
	my $out = $node->safe_psql('postgres', qq{
SET search_path = public;
SELECT replicant.backfill('planned', 'trap.owned', mode => '$mode') > 0;
SELECT current_setting('search_path');
SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema();
SELECT replicant.cancel_backfill(id) FROM replicant.backfill_status WHERE pipeline = 'planned' AND state = 'planned';
});
	my ($planned, $path, $temp) = split /\n/, $out;
	is($planned, 't', "backfill planning ($mode): planned");
	is($path, 'public',
		"backfill_plan_owner_code ($mode): the owner's code did not change the caller's search_path");
	is($temp, '0',
		"backfill_plan_owner_code ($mode): nor did it leave a temporary table in the caller's session");
}
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('planned')");

# ---- a table owner's code runs as the table owner (review of #30 item 12) ----------
# tabowner's trap records, whenever a session other than tabowner's own runs
# it, who ran it, whether it could create a temporary table (it cannot
# inside a security-restricted operation) and whether it could grant itself
# a table of the pipeline owner's.  It sits in a domain's CHECK (the key of
# a keyset backfill: the cursor's values were cast to the domain), in an
# IMMUTABLE function of a partial index's predicate (the planner folds it
# when it plans a chunk's query, in every mode), in a row-level security
# policy (backfill planning sampled the table through it), and in a policy
# that the table forces on its owner.  It may run only as tabowner, and
# only as a security-restricted operation, as CREATE INDEX runs it.
$node->safe_psql('postgres', q{
CREATE ROLE pipeowner LOGIN;
GRANT USAGE ON SCHEMA replicant TO pipeowner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA replicant TO pipeowner;
CREATE SCHEMA tabs AUTHORIZATION tabowner;
GRANT USAGE ON SCHEMA tabs TO pipeowner;
CREATE TABLE public.private_a (x text);
CREATE TABLE public.private_b (x text);
CREATE TABLE public.private_c (x text);
INSERT INTO private_a VALUES ('only pipeowner may read this (a)');
INSERT INTO private_b VALUES ('only pipeowner may read this (b)');
INSERT INTO private_c VALUES ('only pipeowner may read this (c)');
ALTER TABLE private_a OWNER TO pipeowner;
ALTER TABLE private_b OWNER TO pipeowner;
ALTER TABLE private_c OWNER TO pipeowner;
});
$node->safe_psql('postgres', q{
CREATE TABLE tabs.loot (vector text, who text, temp_ok boolean, granted boolean);
GRANT SELECT, INSERT ON tabs.loot TO PUBLIC;
CREATE FUNCTION tabs.trap(vector text, target text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    temp_ok boolean := true;
    granted boolean := true;
BEGIN
    IF session_user = 'tabowner'
       OR EXISTS (SELECT FROM tabs.loot l WHERE l.vector = trap.vector AND l.who = current_user) THEN
        RETURN true;
    END IF;
    BEGIN
        CREATE TEMP TABLE planted (x int);
        DROP TABLE planted;
    EXCEPTION WHEN OTHERS THEN temp_ok := false;
    END;
    BEGIN
        EXECUTE format('GRANT SELECT ON %s TO tabowner', target);
    EXCEPTION WHEN OTHERS THEN granted := false;
    END;
    INSERT INTO tabs.loot VALUES (vector, current_user, temp_ok, granted);
    RETURN true;
END $$;
CREATE FUNCTION tabs.key_ok(v int) RETURNS boolean LANGUAGE sql
    RETURN tabs.trap('domain', 'public.private_a');
CREATE DOMAIN tabs.key_t AS int CHECK (tabs.key_ok(VALUE));
CREATE TABLE tabs.keyed (id tabs.key_t PRIMARY KEY, v text);
INSERT INTO tabs.keyed SELECT g, 'v' || g FROM generate_series(1, 6000) g;
GRANT SELECT ON tabs.keyed TO pipeowner;
CREATE FUNCTION tabs.always() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    RETURN tabs.trap('index', 'public.private_c');
END $f$;
CREATE TABLE tabs.indexed (id int PRIMARY KEY, v int);
INSERT INTO tabs.indexed SELECT g, g FROM generate_series(1, 3000) g;
CREATE INDEX ON tabs.indexed (v) WHERE tabs.always();
GRANT SELECT ON tabs.indexed TO pipeowner;
CREATE TABLE tabs.policed (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = false);
INSERT INTO tabs.policed SELECT g, g FROM generate_series(1, 5000) g;
GRANT SELECT ON tabs.policed TO pipeowner;
CREATE TABLE tabs.forced (id int PRIMARY KEY, v int);
INSERT INTO tabs.forced SELECT g, g FROM generate_series(1, 3000) g;
CREATE FUNCTION tabs.sees(id int) RETURNS boolean LANGUAGE sql
    RETURN tabs.trap('forced', 'public.private_b') AND id % 2 = 0;
ALTER TABLE tabs.forced ENABLE ROW LEVEL SECURITY;
ALTER TABLE tabs.forced FORCE ROW LEVEL SECURITY;
CREATE POLICY seeing ON tabs.forced FOR SELECT USING (tabs.sees(id));
}, extra_params => [ '-U', 'tabowner' ]);
$node->safe_psql('postgres', q{
CREATE PUBLICATION keyed_pub FOR TABLE tabs.keyed;
CREATE PUBLICATION indexed_pub FOR TABLE tabs.indexed;
CREATE PUBLICATION policed_pub FOR TABLE tabs.policed;
CREATE PUBLICATION forced_pub FOR TABLE tabs.forced;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM tabs.loot'), '0',
	'owner code: no loot yet (tabowner\'s own sessions ran the traps)');

sub loot
{
	my ($vector) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(who || ' temp:' || temp_ok || ' grant:' || granted, ', ') FROM tabs.loot"
		  . " WHERE vector = '$vector'");
}

sub tabowner_reads
{
	my ($table) = @_;
	my ($ret) = $node->psql('postgres', "SELECT x FROM $table", extra_params => [ '-U', 'tabowner' ]);
	return $ret == 0;
}

my @pipeowner = (extra_params => [ '-U', 'pipeowner' ]);

# Backfills $table ($rows rows) with a new pipeline of $role's on $pub, to
# the end.  (Nothing else may plan a query of it: the planner would fold the
# partial index's predicate in that session.)
sub owner_code_backfill
{
	my ($p, $pub, $table, $mode, $rows, @role) = @_;
	$node->safe_psql('postgres', "SELECT replicant.create_pipeline('$p', '$pub', '$url')", @role);
	ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status WHERE pipeline = '$p'"),
		"owner code ($p): streaming");
	my $id = $node->safe_psql('postgres',
		"SELECT replicant.backfill('$p', '$table', mode => '$mode')", @role);
	ok(ReplicantTest::poll($node,
			"SELECT state NOT IN ('planned', 'running') FROM replicant.backfill_status WHERE id = $id", 120),
		"owner code ($p): the backfill ends");
	is($node->safe_psql('postgres',
			"SELECT state || ' ' || rows_done FROM replicant.backfill_status WHERE id = $id"),
		"done $rows",
		"owner code ($p): the backfill read every row");
	$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('$p')");
}

# A domain's CHECK: the cursor's values are compared as the domain's base
# type, so the CHECK does not run at all.
owner_code_backfill('keyed', 'keyed_pub', 'tabs.keyed', 'keyset', 6000, @pipeowner);
is(loot('domain'), '',
	'backfill_owner_code_domain: the domain\'s CHECK never ran in the worker (it ran as the pipeline owner)');
ok(!tabowner_reads('public.private_a'), 'domain: the table owner still cannot read private_a');

# A partial index's predicate: planned as tabowner, restricted.
owner_code_backfill('indexed', 'indexed_pub', 'tabs.indexed', 'ctid', 3000, @pipeowner);
is(loot('index'), 'tabowner temp:false grant:false',
	'backfill_owner_code_index: the partial index\'s predicate ran as the table owner, restricted, in the worker');
ok(!tabowner_reads('public.private_c'), 'partial index: the table owner still cannot read private_c');

# A policy that applies to the pipeline's owner: backfill refuses the table
# before reading it, as the worker would; no policy runs in planning.
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('policed', 'policed_pub', '$url')", @pipeowner);
$node->safe_psql('postgres', q{
CREATE FUNCTION tabs.looks(id int) RETURNS boolean LANGUAGE sql
    RETURN tabs.trap('policy', 'public.private_b');
ALTER TABLE tabs.policed ENABLE ROW LEVEL SECURITY;
CREATE POLICY looking ON tabs.policed FOR SELECT USING (tabs.looks(id));
}, extra_params => [ '-U', 'tabowner' ]);
$node->safe_psql('postgres', "SELECT replicant.disable_pipeline('policed')");
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.backfill('policed', 'tabs.policed', mode => 'bitmap')", @pipeowner);
like($err, qr/table "policed" has row-level security that the pipeline owner does not bypass/,
	'policy: backfill refuses a table the pipeline owner does not read whole');
is(loot('policy'), '',
	'backfill_planning_owner_code: the table owner\'s policy never ran as the pipeline owner in planning');
ok(!tabowner_reads('public.private_b'), 'policy: the table owner still cannot read private_b');
$node->safe_psql('postgres', "SELECT replicant.drop_pipeline('policed')");

# A policy forced on the table's owner, and a pipeline owner that bypasses
# row-level security (a superuser): read whole, and the policy never runs.
owner_code_backfill('forced', 'forced_pub', 'tabs.forced', 'bitmap', 3000);
is(loot('forced'), '', 'backfill_owner_code_forced: a policy forced on the table owner never ran');

$sink->stop;
$node->stop;
done_testing();
