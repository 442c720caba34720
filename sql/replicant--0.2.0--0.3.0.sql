-- replicant 0.2.0 -> 0.3.0
--
-- A new installation runs replicant--0.1.0.sql, replicant--0.1.0--0.2.0.sql
-- and then this script, so every change to the SQL objects of 0.3.0 is
-- written here once.  A function created here says SET search_path =
-- pg_catalog, pg_temp itself (test/t/011_search_path.pl checks every
-- function), and one meant for replicant_admin is granted to it here.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

-- ---- The extension's schema belongs to a superuser (this section comes
-- first, before anything else runs in the schema).  A schema "replicant"
-- that existed before CREATE EXTENSION (made by any role with CREATE on the
-- database, or left behind by DROP EXTENSION) keeps its owner, who could
-- rename it, or drop replicant's tables in it and make its own, whose
-- triggers replicant's background workers would then fire as a superuser.
-- So installing or updating to 0.3.0 refuses an extension schema that is
-- not named "replicant" or whose owner is not a superuser; the library
-- refuses to work in it too (README, Security).  An error here rolls back
-- the whole CREATE EXTENSION: nothing of 0.1.0's and 0.2.0's scripts, which
-- ran before (calling only qualified functions and operators), stays.
DO $$
DECLARE
    schema_name name;
    owner_name name;
    owner_is_super boolean;
BEGIN
    SELECT n.nspname, r.rolname, r.rolsuper INTO schema_name, owner_name, owner_is_super
      FROM pg_catalog.pg_extension e
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE e.extname OPERATOR(pg_catalog.=) 'replicant';
    IF schema_name OPERATOR(pg_catalog.<>) 'replicant' THEN
        RAISE EXCEPTION 'the schema of extension "replicant" is not named "replicant"'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('It is named "%s".', schema_name),
                  HINT = 'Rename it back to "replicant" (ALTER SCHEMA ... RENAME TO replicant), and run the command again.';
    END IF;
    IF NOT owner_is_super THEN
        RAISE EXCEPTION 'schema "replicant" is owned by role "%", which is not a superuser', owner_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of the schema could replace replicant''s tables with its own, whose code replicant would run as a superuser.',
                  HINT = 'Drop the schema (DROP SCHEMA replicant) before CREATE EXTENSION replicant; or, once you have checked every object in it, make a superuser its owner (ALTER SCHEMA replicant OWNER TO ...) and run the command again.';
    END IF;
END
$$;

-- The fresh-installation test below: whether a row (its xmin) was written by
-- the running transaction.  age(xmin) <= 0 says so only until 2^31
-- transactions later, when age wraps.
CREATE FUNCTION replicant._xid_is_current(xid) RETURNS boolean
LANGUAGE C STRICT STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_xid_is_current';
REVOKE ALL ON FUNCTION replicant._xid_is_current(xid) FROM PUBLIC;
COMMENT ON FUNCTION replicant._xid_is_current(xid) IS
    'API: Private. Whether the transaction ID is the running transaction''s (or one of its subtransactions''), for the installation script';

-- ---- Locks first, in the order a worker's checkpoint transaction takes
-- them (checkpoints, then table_shapes, then pipelines through their foreign
-- keys): an update that locked pipelines first could deadlock with it, and
-- the deadlock detector would end the worker after its sink had acknowledged
-- a batch not yet checkpointed, which the next worker sends again.
LOCK TABLE replicant.checkpoints, replicant.table_shapes, replicant.pipelines
    IN ACCESS EXCLUSIVE MODE;

-- ---- Slot names are cluster-wide, pipeline names per database: a new
-- pipeline's slot is replicant<database OID>_<name> (a name too long for
-- that keeps its start and gets its hash), and the row records it.  Existing
-- pipelines keep the slot they have, replicant_<name>, which no new name
-- equals (a digit follows "replicant" in these): the update re-delivers and
-- loses nothing.  replicant never decodes, adopts or drops a slot of
-- another database or another output plugin, whatever its name.
ALTER TABLE replicant.pipelines ADD COLUMN slot_name name;
UPDATE replicant.pipelines SET slot_name = ('replicant_' || name)::name;
ALTER TABLE replicant.pipelines ALTER COLUMN slot_name SET NOT NULL;
ALTER TABLE replicant.pipelines ADD CONSTRAINT pipelines_slot_name_key UNIQUE (slot_name);
COMMENT ON COLUMN replicant.pipelines.slot_name IS
    'API: Private. The pipeline''s replication slot: replicant<database OID>_<name>, or replicant_<name> for a pipeline created before 0.3.0.';

-- ---- replicant.status shows a sink URL's path and query (where tokens often
-- live) only to the pipeline's owner (its members, superusers); every other
-- reader sees scheme://host[:port].
CREATE FUNCTION replicant._sink_url(url text, owner oid) RETURNS text
LANGUAGE C STRICT STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_sink_url';
COMMENT ON FUNCTION replicant._sink_url(text, oid) IS
    'API: Private. A sink URL as replicant.status shows it to the reader: without credentials to the owner, scheme://host[:port] to anyone else';

-- ---- The first hour, round 2 (issue 31): ClickHouse in the natural order.
-- create_pipeline(..., enabled => false) creates a pipeline disabled;
-- create_tables => true (format 'clickhouse') has the worker create the
-- target tables that are missing, as sink_ddl prints them, before it
-- delivers anything; sink_ddl(publication text[]) prints them before any
-- pipeline exists.
ALTER TABLE replicant.pipelines ADD COLUMN create_tables boolean NOT NULL DEFAULT false;

DROP FUNCTION replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text);
DROP FUNCTION replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text);
DROP FUNCTION replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text, text);
-- They are made once, with enabled and create_tables, as they are now, in
-- the section "The resync after a slot loss" below (with max_retained_wal
-- and on_slot_loss).

CREATE FUNCTION replicant.sink_ddl(publication text[])
RETURNS SETOF text
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_sink_ddl_publications';
COMMENT ON FUNCTION replicant.sink_ddl(text[]) IS
    'The ClickHouse CREATE TABLE statement for each table the publications deliver, before any pipeline exists';

REVOKE ALL ON FUNCTION replicant.sink_ddl(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION replicant.sink_ddl(text[]) TO replicant_admin;

-- ---- Retries a user can see (issue 31): replicant.status.next_retry_at is
-- when a pipeline waiting to retry its sink tries again, and
-- retry_pipeline(name) has it try at once.  _worker_status() keeps its
-- columns (the library still serves the views of 0.1.0 and 0.2.0);
-- _worker_status_v2(), the same C function, adds next_retry_at.
CREATE FUNCTION replicant._worker_status_v2(
    OUT pipeline_id integer,
    OUT state text,
    OUT worker_pid integer,
    OUT transactions_delivered bigint,
    OUT changes_delivered bigint,
    OUT batches_delivered bigint,
    OUT bytes_delivered bigint,
    OUT retries bigint,
    OUT last_delivery_at timestamptz,
    OUT last_error text,
    OUT sink_latency_ms double precision,
    OUT last_http_status integer,
    OUT next_retry_at timestamptz)
RETURNS SETOF record
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_worker_status';
COMMENT ON FUNCTION replicant._worker_status_v2() IS
    'API: Private. Live worker state behind replicant.status, for readers of that view';
GRANT EXECUTE ON FUNCTION replicant._worker_status_v2() TO PUBLIC;

-- replicant.status shows next_retry_at: the view is made once, as it is
-- now, in the section "The resync after a slot loss" below.

-- _worker_status() stays: tests read it, and so may monitoring queries.

CREATE FUNCTION replicant.retry_pipeline(name text) RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_retry_pipeline';
COMMENT ON FUNCTION replicant.retry_pipeline(text) IS
    'Has a pipeline that waits to retry its sink try again now';
REVOKE ALL ON FUNCTION replicant.retry_pipeline(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION replicant.retry_pipeline(text) TO replicant_admin;

-- ---- Progress a person can watch (issue 31): whoever may read
-- replicant.status, and pg_monitor's members, may read backfill_status; a
-- finished table's estimate is its count, and a running one never shows
-- more than 100 %, nor less once its every shard has been read.
CREATE FUNCTION replicant._check_progress_reader() RETURNS boolean
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_check_progress_reader';
COMMENT ON FUNCTION replicant._check_progress_reader() IS
    'API: Private. Raises an error unless the caller may read replicant.status or is a member of pg_monitor';
GRANT EXECUTE ON FUNCTION replicant._check_progress_reader() TO PUBLIC;

-- ---- Snapshot and backfill reads (issue 30 item 5): a table that stops
-- ---- being published is 'skipped' --------------------------------------------

-- A backfill, or a table of an initial snapshot, whose table no publication
-- of the pipeline publishes any more is 'skipped': the rest of it is never
-- read.  (Until this update the library records it as 'cancelled'.)
ALTER TABLE replicant.backfills DROP CONSTRAINT backfills_state_check;
ALTER TABLE replicant.backfills ADD CONSTRAINT backfills_state_check
    CHECK (state IN ('planned', 'running', 'done', 'cancelled', 'failed', 'skipped'));

-- ---- Snapshot progress (issue 30 item 15): rows_done moves with every
-- ---- acknowledged batch ------------------------------------------------------

-- Rows of an initial snapshot's window that the sink acknowledged before the
-- window's progress is recorded, per snapshot worker, from shared memory.
CREATE FUNCTION replicant._snapshot_progress(
    OUT backfill_id bigint,
    OUT shard integer,
    OUT next_block bigint,
    OUT rows_done bigint)
RETURNS SETOF record
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_snapshot_progress';
-- Run with the privileges of whoever reads replicant.backfill_status; the
-- function checks that the reader may SELECT that view.
GRANT EXECUTE ON FUNCTION replicant._snapshot_progress() TO PUBLIC;
COMMENT ON FUNCTION replicant._snapshot_progress() IS
    'API: Private. Live snapshot progress behind replicant.backfill_status, for readers of that view';

GRANT USAGE ON SCHEMA replicant TO pg_monitor;

-- ---- Uninstall and reinstall (issue 31).  The schema replicant is the
-- extension's own schema (the control file's "schema"), which PostgreSQL
-- does not let the extension own ("cannot add schema ... because the schema
-- contains the extension"), so DROP EXTENSION leaves it behind with its
-- grants (README: "Uninstall").  A new installation into such a left-over
-- schema starts without them: every privilege on the schema but its
-- owner's is revoked (then replicant_admin's and pg_monitor's USAGE
-- granted again; a section that grants on the schema goes after this one),
-- and a schema with default privileges, which the objects created above
-- have received already, is refused.  ALTER EXTENSION UPDATE keeps
-- everything: only the installing transaction created the extension's
-- dependency on its schema.
DO $$
DECLARE
    grantee_name text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                     JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.objid
                    WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                      AND e.extname OPERATOR(pg_catalog.=) 'replicant'
                      AND replicant._xid_is_current(d.xmin)) THEN
        RETURN;    -- an update
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_default_acl
                WHERE defaclnamespace OPERATOR(pg_catalog.=) 'replicant'::pg_catalog.regnamespace) THEN
        RAISE EXCEPTION 'schema "replicant" has default privileges'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'They would grant privileges on replicant''s tables, which hold secrets.',
                  HINT = 'Drop the schema left by an earlier installation (DROP SCHEMA replicant), or its default privileges, before CREATE EXTENSION replicant.';
    END IF;
    FOR grantee_name IN
        SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                             ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
          FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
         WHERE n.nspname OPERATOR(pg_catalog.=) 'replicant'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA replicant FROM %s', grantee_name);
    END LOOP;
    GRANT USAGE ON SCHEMA replicant TO replicant_admin, pg_monitor;
END
$$;

-- ---- replicant_admin is trusted only as replicant would make it.  Roles are
-- cluster-wide, and 0.2.0 granted the management functions to a
-- replicant_admin that existed already, which any CREATEROLE holder could
-- have made first, keeping control of its membership (on 16 and later the
-- creator of a role holds ADMIN OPTION on it).  Installing or updating to
-- 0.3.0 therefore refuses a replicant_admin that can log in or has a role
-- attribute, or that has a member granted by a role that is not a superuser
-- or a member other than a superuser with ADMIN OPTION.  This runs after
-- 0.2.0's script, in the same transaction, so a refused CREATE EXTENSION
-- grants nothing.
DO $$
DECLARE
    admin pg_catalog.pg_roles%ROWTYPE;
    bad_member name;
BEGIN
    SELECT * INTO admin FROM pg_catalog.pg_roles
     WHERE rolname OPERATOR(pg_catalog.=) 'replicant_admin';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF admin.rolcanlogin OR admin.rolsuper OR admin.rolcreaterole OR admin.rolcreatedb
       OR admin.rolreplication OR admin.rolbypassrls THEN
        RAISE EXCEPTION 'role "replicant_admin" is not safe to grant replicant''s management functions to'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The role can log in or has role attributes.',
                  HINT = 'replicant_admin must be a NOLOGIN role without attributes that only superusers manage: fix it with ALTER ROLE, or drop it (DROP OWNED BY replicant_admin in each database, then DROP ROLE replicant_admin), and run the command again.';
    END IF;
    SELECT u.rolname INTO bad_member
      FROM pg_catalog.pg_auth_members m
      JOIN pg_catalog.pg_roles u ON u.oid OPERATOR(pg_catalog.=) m.member
      LEFT JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) m.grantor
     WHERE m.roleid OPERATOR(pg_catalog.=) admin.oid
       AND (NOT coalesce(g.rolsuper, false) OR (m.admin_option AND NOT u.rolsuper))
     ORDER BY u.rolname
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'role "replicant_admin" is not safe to grant replicant''s management functions to'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Role "%s" is a member of it by the grant of a role that is not a superuser, or holds ADMIN OPTION on it.', bad_member),
                  HINT = 'Only superusers may grant replicant_admin: revoke that membership (and grant it again as a superuser, without ADMIN OPTION), or drop the role (DROP OWNED BY replicant_admin in each database, then DROP ROLE replicant_admin), and run the command again.';
    END IF;
END
$$;

-- ----------------------------------------------------------------------------
-- resume_pipeline waives exactly the cause of the halt it resumes.  A halt
-- met while decoding records that cause (halt_cause, value-free: a missing
-- publication by name, a table's shape change or missing privilege by its
-- OID); resume_pipeline turns it into a waiver for the commits up to the
-- resume, kept until the checkpoint passes it.  Any other halt waives
-- nothing.
ALTER TABLE replicant.pipelines ADD COLUMN halt_cause text;
COMMENT ON COLUMN replicant.pipelines.halt_cause IS
    'API: Private. What resuming the halt accepts while decoding (publication:<name>, schema:<relid>, privilege:<relid>), or NULL: nothing.';

CREATE TABLE replicant.resume_waivers (
    pipeline_id integer NOT NULL REFERENCES replicant.pipelines ON DELETE CASCADE,
    cause       text NOT NULL,
    up_to       pg_lsn NOT NULL,    -- commits at or before this LSN
    PRIMARY KEY (pipeline_id, cause)
);
REVOKE ALL ON replicant.resume_waivers FROM PUBLIC;
COMMENT ON TABLE replicant.resume_waivers IS
    'API: Private. Halt causes resume_pipeline accepted, per pipeline, for commits up to a WAL position.';

-- ----------------------------------------------------------------------------
-- alter_pipeline changes what decoding delivers (publications, messages,
-- message_prefixes) only for what commits from the WAL position of the
-- call on: the options before it are kept here for the commits before it,
-- so that a transaction re-delivered after the call (its batch was not
-- acknowledged yet) carries exactly what it carried before.  Rows the
-- checkpoint has passed are removed by the next alter_pipeline.
CREATE TABLE replicant.pipeline_epochs (
    pipeline_id      integer NOT NULL REFERENCES replicant.pipelines ON DELETE CASCADE,
    until_lsn        pg_lsn NOT NULL,   -- for commits before this LSN
    publications     text[] NOT NULL,
    publication_lsns pg_lsn[],
    messages         boolean NOT NULL,
    message_prefixes text[],
    PRIMARY KEY (pipeline_id, until_lsn)
);
REVOKE ALL ON replicant.pipeline_epochs FROM PUBLIC;
COMMENT ON TABLE replicant.pipeline_epochs IS
    'API: Private. A pipeline''s decoding options before an alter_pipeline call, for the commits before it.';

-- ----------------------------------------------------------------------------
-- CloudEvents read ids tell every row apart without revealing it: a digest
-- of the row's replica identity (unpublished columns included), or of where
-- it lies for a table without one, keyed by this random key of the
-- pipeline, which never leaves the server.
ALTER TABLE replicant.pipelines ADD COLUMN event_id_key bytea NOT NULL
    DEFAULT pg_catalog.sha256(pg_catalog.convert_to(
        pg_catalog.gen_random_uuid()::pg_catalog.text
        OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::pg_catalog.text, 'UTF8'));
COMMENT ON COLUMN replicant.pipelines.event_id_key IS
    'API: Private. Secret key of the digests in CloudEvents read ids; random per pipeline.';

-- ----------------------------------------------------------------------------
-- How far replicant may have confirmed a pipeline's slot beyond the
-- checkpoint's end (a new slot's consistent point, WAL that delivered
-- nothing): a worker that finds its slot further than both halts, since
-- something else moved it (pg_replication_slot_advance()).  A resume of
-- that halt accepts the gap: its cause names the position.  A shape
-- change's cause names the shape the table changed into.
CREATE TABLE replicant.slot_positions (
    pipeline_id   integer PRIMARY KEY REFERENCES replicant.pipelines ON DELETE CASCADE,
    confirmed_lsn pg_lsn NOT NULL
);
REVOKE ALL ON replicant.slot_positions FROM PUBLIC;
COMMENT ON TABLE replicant.slot_positions IS
    'API: Private. How far replicant may have confirmed each pipeline''s slot, besides the checkpoint''s end.';
COMMENT ON COLUMN replicant.pipelines.halt_cause IS
    'API: Private. What resuming the halt accepts while decoding (publication:<name>, schema:<relid>:<shape digest>, privilege:<relid>, slot:<lsn>), or NULL: nothing.';

-- ----------------------------------------------------------------------------
-- No crash loop across crash restarts.  A worker that dies by a signal (a
-- segmentation fault, the OOM killer) makes the postmaster restart the
-- whole server, which forgets the launcher's count of failed runs; each run
-- is therefore counted here too, committed before the worker does anything
-- else, and started over by progress, by a shutdown, or by enable_pipeline
-- and resume_pipeline.  Past REPLICANT_MAX_RETRIES the pipeline halts.  The
-- worker only updates its row, which create_pipeline makes.
CREATE TABLE replicant.worker_runs (
    pipeline_id      integer PRIMARY KEY REFERENCES replicant.pipelines ON DELETE CASCADE,
    without_progress integer NOT NULL DEFAULT 0
);
REVOKE ALL ON replicant.worker_runs FROM PUBLIC;
COMMENT ON TABLE replicant.worker_runs IS
    'API: Private. Runs of each pipeline''s worker in a row without progress, across crash restarts.';
INSERT INTO replicant.worker_runs (pipeline_id) SELECT id FROM replicant.pipelines;

-- ----------------------------------------------------------------------------
-- What a pipeline's slot costs (issue 33).  replicant.status shows the WAL
-- each pipeline's slot retains (from its restart_lsn to the position
-- pg_replication_slots measures from: the WAL written, or replayed on a
-- standby), the server's wal_status and safe_wal_size for it, the
-- pipeline's budget, and wal_warning: past 80 % of the budget, or with
-- safe_wal_size under 20 % of max_slot_wal_keep_size.  max_retained_wal,
-- an option of create_pipeline and alter_pipeline ('20GB', parsed as a
-- setting in megabytes is; NULL: none), is that budget: past it the worker
-- drops the slot, so that the next checkpoint frees the WAL, and halts (or
-- resyncs: the next section).
ALTER TABLE replicant.pipelines ADD COLUMN max_retained_wal bigint
    CHECK (max_retained_wal OPERATOR(pg_catalog.>) 0);
COMMENT ON COLUMN replicant.pipelines.max_retained_wal IS
    'API: Private. Bytes of WAL the pipeline''s slot may retain before the worker gives it up and halts; NULL: no budget.';

-- ----------------------------------------------------------------------------
-- The resync after a slot loss (issue 33 item 4).  on_slot_loss => 'resync'
-- (create_pipeline, alter_pipeline; 'halt', the default, halts as before)
-- makes a lost slot (invalidated, dropped, missing after a promotion, or
-- given up past max_retained_wal) a resync instead of a halt; and
-- resync_pipeline(name) asks for one.  resync_reason is the resync under
-- way (NULL: none), resync_slot_dropped whether what was left of the old
-- slot is gone (from then on a slot of the pipeline's name is the
-- resync's), resync_lost_from the checkpoint's commit when it was.  The
-- status view shows 'resync_pending' until the sink answered and the old
-- slot is gone, 'resyncing' while the tables are read again.
ALTER TABLE replicant.pipelines ADD COLUMN on_slot_loss text NOT NULL DEFAULT 'halt'
    CHECK (on_slot_loss OPERATOR(pg_catalog.=) ANY ('{halt,resync}'));
ALTER TABLE replicant.pipelines ADD COLUMN resync_reason text;
ALTER TABLE replicant.pipelines ADD COLUMN resync_lost_from pg_lsn;
ALTER TABLE replicant.pipelines ADD COLUMN resync_slot_dropped boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN replicant.pipelines.on_slot_loss IS
    'API: Private. What a lost slot does: halt the pipeline, or resync it.';
COMMENT ON COLUMN replicant.pipelines.resync_reason IS
    'API: Private. Why the pipeline resyncs (value-free, "requested" for resync_pipeline); NULL: no resync under way.';

-- ----------------------------------------------------------------------------
-- Destinations (issue 34; docs/destinations-design.md): where a pipeline's
-- changes go and how (the sink's URL, format, secret, headers, timeouts,
-- batch limits, the slot budget) moves from replicant.pipelines, which keeps
-- what is decoded, to replicant.destinations.  create_pipeline makes a
-- pipeline's first destination ("default" unless named), add_destination
-- (the section "Several destinations" below) the others, up to 16;
-- alter_destination changes one, alter_pipeline the only one.  Each existing
-- pipeline gets its destination "default" here, with its options as they
-- are; its checkpoint row becomes that destination's, with its LSNs, and
-- "default" keeps every wire id: nothing is delivered twice.  A running
-- worker reads the options only as it starts, and keys its checkpoint by
-- pipeline as before, so it streams on through the update (the moved
-- columns leave replicant.pipelines at the end of this script, after the
-- views below read them from here).  The table holds secrets: no grant.
CREATE TABLE replicant.destinations (
    id                      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pipeline_id             integer NOT NULL REFERENCES replicant.pipelines ON DELETE CASCADE,
    name                    text NOT NULL CHECK (name ~ '^[a-z0-9_]{1,48}$'),
    sink_url                text NOT NULL,
    format                  text NOT NULL DEFAULT 'replicant',
    headers                 jsonb NOT NULL,
    secret                  text,
    secret_previous         text,
    secret_previous_until   timestamptz,
    ca_file                 text,
    batch_max_bytes         integer NOT NULL,
    batch_max_transactions  integer NOT NULL,
    http_timeout_ms         integer NOT NULL,
    connect_timeout_ms      integer NOT NULL,
    create_tables           boolean NOT NULL DEFAULT false,
    max_retained_wal        bigint CHECK (max_retained_wal OPERATOR(pg_catalog.>) 0),
    on_slot_loss            text NOT NULL DEFAULT 'halt'
        CHECK (on_slot_loss OPERATOR(pg_catalog.=) ANY ('{halt,resync}')),
    -- a destination halted alone (its sink refused, its format cannot go on)
    halt_reason             text,
    halt_lsn                pg_lsn,
    -- it gave its hold on the slot up (past its max_retained_wal)
    slot_released           boolean NOT NULL DEFAULT false,
    -- a resync of this destination alone under way (reason; NULL: none),
    -- from its checkpoint's commit before it to where it streams again,
    -- and the resyncs in a row that on_slot_loss => 'resync' started
    resync_reason           text,
    resync_lost_from        pg_lsn,
    resync_lost_to          pg_lsn,
    resync_losses           integer NOT NULL DEFAULT 0,
    resync_backfill_from    bigint,
    created_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pipeline_id, name)
);
REVOKE ALL ON replicant.destinations FROM PUBLIC;
COMMENT ON TABLE replicant.destinations IS
    'API: Private. Where each pipeline delivers and how (up to 16 destinations per pipeline); holds secrets, never granted to PUBLIC.';
INSERT INTO replicant.destinations
       (pipeline_id, name, sink_url, format, headers, secret, secret_previous,
        secret_previous_until, ca_file, batch_max_bytes, batch_max_transactions,
        http_timeout_ms, connect_timeout_ms, create_tables, max_retained_wal, on_slot_loss)
SELECT id, 'default', sink_url, format, headers, secret, secret_previous,
       secret_previous_until, ca_file, batch_max_bytes, batch_max_transactions,
       http_timeout_ms, connect_timeout_ms, create_tables, max_retained_wal, on_slot_loss
  FROM replicant.pipelines ORDER BY id;
COMMENT ON COLUMN replicant.destinations.max_retained_wal IS
    'API: Private. Bytes of WAL the pipeline''s slot may retain for the destination before the worker gives it up; NULL: no budget.';
COMMENT ON COLUMN replicant.destinations.on_slot_loss IS
    'API: Private. What a lost slot does: halt the pipeline, or resync it.';
COMMENT ON COLUMN replicant.destinations.halt_reason IS
    'API: Private. Why the destination alone halted (its sink refused a request, its format cannot render a change), value-free; NULL: not halted.  A halt of the pipeline''s is the pipeline''s row''s.';
COMMENT ON COLUMN replicant.destinations.halt_lsn IS
    'API: Private. The commit the destination halted at, or NULL.';
COMMENT ON COLUMN replicant.destinations.slot_released IS
    'API: Private. The destination gave its hold on the slot up, past its max_retained_wal while others held it: it is halted for good (until resync_pipeline(pipeline, destination)), and its checkpoint no longer counts in the floor.';
COMMENT ON COLUMN replicant.destinations.resync_reason IS
    'API: Private. Why the destination alone reads every table again beside the stream (value-free, "requested" for resync_pipeline); NULL: no such resync under way.';
COMMENT ON COLUMN replicant.destinations.resync_lost_from IS
    'API: Private. The commit of the destination''s checkpoint when its resync began (NULL: none delivered).';
COMMENT ON COLUMN replicant.destinations.resync_lost_to IS
    'API: Private. Where the destination streams again: commits after it are streamed, those before it are read.';
COMMENT ON COLUMN replicant.destinations.resync_backfill_from IS
    'API: Private. The lowest replicant.backfills id its resync''s reads can have: its backfills from there on are the resync''s.';
COMMENT ON COLUMN replicant.destinations.resync_losses IS
    'API: Private. Resyncs in a row that on_slot_loss => ''resync'' started without one finishing; past 3 the destination gives its hold up for good.';

-- A checkpoint is a destination's; pipeline_id stays (joins, the cascade).
ALTER TABLE replicant.checkpoints ADD COLUMN destination_id integer
    REFERENCES replicant.destinations ON DELETE CASCADE;
UPDATE replicant.checkpoints c SET destination_id = d.id
  FROM replicant.destinations d WHERE d.pipeline_id OPERATOR(pg_catalog.=) c.pipeline_id;
ALTER TABLE replicant.checkpoints ALTER COLUMN destination_id SET NOT NULL;
ALTER TABLE replicant.checkpoints DROP CONSTRAINT checkpoints_pkey;
ALTER TABLE replicant.checkpoints ADD PRIMARY KEY (destination_id);
COMMENT ON TABLE replicant.checkpoints IS
    'API: Private. Last commit LSN acknowledged by the sink, per destination.';

-- The destination a backfill is read for (add_destination's snapshot =>
-- 'incremental'), dropped with it; NULL: every destination of the
-- pipeline.
ALTER TABLE replicant.backfills ADD COLUMN destination_id integer
    REFERENCES replicant.destinations ON DELETE CASCADE;

-- create_pipeline and alter_pipeline as they are now (0.2.0's were dropped
-- above): enabled and create_tables (issue 31), max_retained_wal and
-- on_slot_loss (issue 33), and the name of the pipeline's destination
-- (issue 34).
CREATE FUNCTION replicant.create_pipeline(
    name                    text,
    publication             text[],
    sink_url                text,
    snapshot                text DEFAULT 'none',
    batch_max_bytes         integer DEFAULT 8388608,
    batch_max_transactions  integer DEFAULT 10000,
    http_timeout_ms         integer DEFAULT 30000,
    connect_timeout_ms      integer DEFAULT 5000,
    headers                 jsonb DEFAULT '{}',
    secret                  text DEFAULT NULL,
    snapshot_workers        integer DEFAULT 2,
    messages                boolean DEFAULT false,
    message_prefixes        text[] DEFAULT NULL,
    ca_file                 text DEFAULT NULL,
    failover                boolean DEFAULT false,
    format                  text DEFAULT 'replicant',
    enabled                 boolean DEFAULT true,
    create_tables           boolean DEFAULT false,
    max_retained_wal        text DEFAULT NULL,
    on_slot_loss            text DEFAULT 'halt',
    destination             text DEFAULT 'default')
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_create_pipeline';
COMMENT ON FUNCTION replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text, boolean, boolean, text, text, text) IS
    'Creates a pipeline streaming the publications'' changes to sink_url';

CREATE FUNCTION replicant.create_pipeline(
    name                    text,
    publication             text,
    sink_url                text,
    snapshot                text DEFAULT 'none',
    batch_max_bytes         integer DEFAULT 8388608,
    batch_max_transactions  integer DEFAULT 10000,
    http_timeout_ms         integer DEFAULT 30000,
    connect_timeout_ms      integer DEFAULT 5000,
    headers                 jsonb DEFAULT '{}',
    secret                  text DEFAULT NULL,
    snapshot_workers        integer DEFAULT 2,
    messages                boolean DEFAULT false,
    message_prefixes        text[] DEFAULT NULL,
    ca_file                 text DEFAULT NULL,
    failover                boolean DEFAULT false,
    format                  text DEFAULT 'replicant',
    enabled                 boolean DEFAULT true,
    create_tables           boolean DEFAULT false,
    max_retained_wal        text DEFAULT NULL,
    on_slot_loss            text DEFAULT 'halt',
    destination             text DEFAULT 'default')
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_create_pipeline';
COMMENT ON FUNCTION replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text, boolean, boolean, text, text, text) IS
    'Creates a pipeline streaming one publication''s changes to sink_url';

CREATE FUNCTION replicant.alter_pipeline(
    name                    text,
    publication             text[] DEFAULT NULL,
    sink_url                text DEFAULT NULL,
    batch_max_bytes         integer DEFAULT NULL,
    batch_max_transactions  integer DEFAULT NULL,
    http_timeout_ms         integer DEFAULT NULL,
    connect_timeout_ms      integer DEFAULT NULL,
    headers                 jsonb DEFAULT NULL,
    secret                  text DEFAULT NULL,
    clear_secret            boolean DEFAULT false,
    messages                boolean DEFAULT NULL,
    message_prefixes        text[] DEFAULT NULL,
    secret_previous_until   timestamptz DEFAULT NULL,
    ca_file                 text DEFAULT NULL,
    format                  text DEFAULT NULL,
    create_tables           boolean DEFAULT NULL,
    max_retained_wal        text DEFAULT NULL,
    on_slot_loss            text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_alter_pipeline';
COMMENT ON FUNCTION replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text, text, boolean, text, text) IS
    'Changes a pipeline''s options; NULL leaves an option as it is; the worker restarts with them';

REVOKE ALL ON FUNCTION
    replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text, boolean, boolean, text, text, text),
    replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text, boolean, boolean, text, text, text),
    replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text, text, boolean, text, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text, boolean, boolean, text, text, text),
    replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text, boolean, boolean, text, text, text),
    replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text, text, boolean, text, text)
TO replicant_admin;

-- alter_destination changes a destination's options as alter_pipeline
-- changes the sink options of a pipeline's only destination (issue 34).
CREATE FUNCTION replicant.alter_destination(
    pipeline                text,
    name                    text,
    sink_url                text DEFAULT NULL,
    batch_max_bytes         integer DEFAULT NULL,
    batch_max_transactions  integer DEFAULT NULL,
    http_timeout_ms         integer DEFAULT NULL,
    connect_timeout_ms      integer DEFAULT NULL,
    headers                 jsonb DEFAULT NULL,
    secret                  text DEFAULT NULL,
    clear_secret            boolean DEFAULT false,
    secret_previous_until   timestamptz DEFAULT NULL,
    ca_file                 text DEFAULT NULL,
    format                  text DEFAULT NULL,
    create_tables           boolean DEFAULT NULL,
    max_retained_wal        text DEFAULT NULL,
    on_slot_loss            text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_alter_destination';
COMMENT ON FUNCTION replicant.alter_destination(text, text, text, integer, integer, integer, integer, jsonb, text, boolean, timestamptz, text, text, boolean, text, text) IS
    'Changes a destination''s options; NULL leaves an option as it is; the worker restarts with them';
REVOKE ALL ON FUNCTION replicant.alter_destination(text, text, text, integer, integer, integer, integer, jsonb, text, boolean, timestamptz, text, text, boolean, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION replicant.alter_destination(text, text, text, integer, integer, integer, integer, jsonb, text, boolean, timestamptz, text, text, boolean, text, text) TO replicant_admin;

-- With a destination, that destination alone reads every table again
-- beside the stream, from the WAL insert position on (issue 34).
CREATE FUNCTION replicant.resync_pipeline(name text, destination text DEFAULT NULL) RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_resync_pipeline';
COMMENT ON FUNCTION replicant.resync_pipeline(text, text) IS
    'Reads every published table again (under a new slot, or for one destination beside the stream), and has the sink sweep the rows it did not read';
REVOKE ALL ON FUNCTION replicant.resync_pipeline(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION replicant.resync_pipeline(text, text) TO replicant_admin;

-- replicant.status, as it is now: the slot the row names, and only if it is
-- of this database and replicant's plugin; the sink URL as the reader may
-- see it; when a pipeline waiting to retry tries again (issue 31); then,
-- added at the end, what the slot costs; and the resync states.  One row
-- per pipeline however many destinations it has (issue 34): its
-- checkpoint_lsn is their floor, a destination halted alone halts it.
CREATE OR REPLACE VIEW replicant.status AS
SELECT p.name AS pipeline,
       CASE
           WHEN pg_catalog.pg_is_in_recovery() THEN 'standby'
           WHEN p.halt_reason IS NOT NULL THEN 'halted'
           WHEN NOT p.enabled THEN 'disabled'
           WHEN p.resync_reason IS NOT NULL AND NOT p.resync_slot_dropped THEN 'resync_pending'
           WHEN p.resync_reason IS NOT NULL THEN 'resyncing'
           WHEN d.halt_reason IS NOT NULL THEN 'halted'
           ELSE coalesce(w.state, 'starting')
       END AS state,
       p.slot_name COLLATE pg_catalog."default" AS slot_name,  -- as 0.2.0's column
       c.commit_lsn AS checkpoint_lsn,
       s.confirmed_flush_lsn,
       pg_wal_lsn_diff(l.current_lsn, s.confirmed_flush_lsn)::bigint AS lag_bytes,
       coalesce(w.transactions_delivered, 0) AS transactions_delivered,
       coalesce(w.changes_delivered, 0) AS changes_delivered,
       coalesce(w.batches_delivered, 0) AS batches_delivered,
       coalesce(w.bytes_delivered, 0) AS bytes_delivered,
       coalesce(w.retries, 0) AS retries,
       coalesce(w.last_delivery_at, c.updated_at) AS last_delivery_at,
       coalesce(p.halt_reason, p.resync_reason,
                CASE WHEN d.n > 1 THEN 'destination "' || d.halted || '": ' || d.halt_reason
                     ELSE d.halt_reason END,
                w.last_error) AS last_error,
       w.worker_pid,
       replicant._sink_url(d.sink_url, p.owner) AS sink_url,
       w.sink_latency_ms,
       w.last_http_status,
       p.publications,
       CASE WHEN p.halt_reason IS NULL AND p.enabled THEN w.next_retry_at END AS next_retry_at,
       r.retained_wal_bytes,
       s.wal_status,
       s.safe_wal_size,
       d.max_retained_wal,
       coalesce((r.retained_wal_bytes OPERATOR(pg_catalog.*) 5)
                    OPERATOR(pg_catalog.>) (d.max_retained_wal OPERATOR(pg_catalog.*) 4), false)
       OR coalesce((s.safe_wal_size OPERATOR(pg_catalog.*) 5)
                       OPERATOR(pg_catalog.<) l.max_slot_wal_keep_size, false) AS wal_warning
  FROM replicant.pipelines p
  CROSS JOIN LATERAL (SELECT CASE
                                 WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                                 ELSE pg_catalog.pg_current_wal_lsn()
                             END AS current_lsn,
                             pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_slot_wal_keep_size'))
                                 AS max_slot_wal_keep_size) l
  -- The destinations rolled up: the sink URL of the only one (NULL with
  -- several), the smallest budget (the first to give its hold up, as in
  -- replicant.metrics), the oldest halted one.
  CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS n,
                             CASE WHEN pg_catalog.count(*) = 1 THEN pg_catalog.min(dd.sink_url) END AS sink_url,
                             pg_catalog.min(dd.max_retained_wal) FILTER (WHERE NOT dd.slot_released)
                                 AS max_retained_wal,
                             (pg_catalog.array_agg(dd.name ORDER BY dd.id)
                                  FILTER (WHERE dd.halt_reason IS NOT NULL))[1] AS halted,
                             (pg_catalog.array_agg(dd.halt_reason ORDER BY dd.id)
                                  FILTER (WHERE dd.halt_reason IS NOT NULL))[1] AS halt_reason
                        FROM replicant.destinations dd
                       WHERE dd.pipeline_id = p.id) d
  -- The floor (checkpoint_floor.c): the lowest checkpoint of the
  -- pipeline's destinations that hold the slot, NULL while one has none.
  LEFT JOIN LATERAL (SELECT f.commit_lsn, f.updated_at
                       FROM replicant.destinations fd
                       LEFT JOIN replicant.checkpoints f ON f.destination_id = fd.id
                      WHERE fd.pipeline_id = p.id AND NOT fd.slot_released
                      ORDER BY f.end_lsn NULLS FIRST LIMIT 1) c ON true
  LEFT JOIN pg_catalog.pg_replication_slots s
         ON s.slot_name = p.slot_name
        AND s.database = pg_catalog.current_database()
        AND s.plugin = 'replicant'
  CROSS JOIN LATERAL (SELECT pg_catalog.pg_wal_lsn_diff(l.current_lsn, s.restart_lsn)::bigint
                                 AS retained_wal_bytes) r
  LEFT JOIN replicant._worker_status_v2() w ON w.pipeline_id = p.id;

-- ---- Backfill progress (issue 31), with whom a backfill is for and what
-- it waits for (issue 34): rows_done (and percent) add the rows of a
-- snapshot window while the shard's recorded position is still the start
-- of the window they come from; destination is the one it is for (NULL:
-- all); waiting_for names a halted destination of the pipeline (a backfill
-- waits for it: its rows are in no WAL that destination could catch up
-- from).
CREATE OR REPLACE VIEW replicant.backfill_status AS
SELECT b.id,
       p.name AS pipeline,
       b.relid::regclass AS relation,
       b.mode,
       b.state,
       d.rows_done,
       CASE
           WHEN b.state = 'done' OR r.read_to_end THEN d.rows_done
           WHEN b.state = 'running' THEN greatest(b.rows_estimate, d.rows_done)
           ELSE b.rows_estimate
       END AS rows_estimate,
       CASE
           WHEN b.state = 'done' OR r.read_to_end THEN 100.0
           WHEN b.rows_estimate > 0 THEN least(99.9, round(100.0 * d.rows_done / b.rows_estimate, 1))
           ELSE 0.0
       END AS percent,
       b.started_at,
       b.finished_at,
       (SELECT h.name FROM replicant.destinations h
         WHERE h.id OPERATOR(pg_catalog.=) b.destination_id) AS destination,
       CASE WHEN b.state IN ('planned', 'running') THEN
           (SELECT pg_catalog.format('destination "%s" is halted', h.name)
              FROM replicant.destinations h
             WHERE h.pipeline_id OPERATOR(pg_catalog.=) b.pipeline_id AND h.halt_reason IS NOT NULL
               AND NOT h.slot_released
             ORDER BY h.name
             LIMIT 1)
       END AS waiting_for
  FROM replicant.backfills b
  JOIN replicant.pipelines p ON p.id = b.pipeline_id
  LEFT JOIN (SELECT s.backfill_id, sum(l.rows_done)::bigint AS rows_done
               FROM replicant._snapshot_progress() l
               JOIN replicant.snapshot_shards s
                 ON s.backfill_id = l.backfill_id AND s.shard = l.shard
                AND s.next_block = l.next_block AND NOT s.done
              GROUP BY s.backfill_id) w ON w.backfill_id = b.id
  CROSS JOIN LATERAL (SELECT b.rows_done + coalesce(w.rows_done, 0) AS rows_done) d
  CROSS JOIN LATERAL (
      SELECT b.state = 'running' AND b.kind = 'initial'
             AND EXISTS (SELECT FROM replicant.snapshot_shards s WHERE s.backfill_id = b.id)
             AND NOT EXISTS (SELECT FROM replicant.snapshot_shards s
                              WHERE s.backfill_id = b.id AND NOT s.done) AS read_to_end) r
 WHERE replicant._check_progress_reader();
COMMENT ON VIEW replicant.backfill_status IS
    'One row per table read by a snapshot or backfill: mode, state, progress, and what it waits for';
GRANT SELECT ON replicant.backfill_status TO PUBLIC;

-- ---- Metrics (issue 35): replicant.metrics, one row per pipeline, metric,
-- label set and destination (issue 34: NULL on the pipeline's own metrics,
-- the destination's name on its sink's), shaped for Prometheus (contrib/prometheus/queries.yaml
-- maps it for postgres_exporter).  Counters and gauges of a running
-- pipeline come from shared memory (_metrics()); the view adds what the
-- catalog and pg_replication_slots know: the state of a pipeline no worker
-- runs, lag in bytes, retained WAL, safe_wal_size, the WAL budget, and the
-- progress of backfills not yet finished.  Readable by pg_monitor and
-- replicant_admin members, not PUBLIC.  Labels are the pipeline's name, a
-- retry's status class, a histogram bucket's bound and a table's name
-- (schema-qualified, whatever the reader's search_path).
CREATE FUNCTION replicant._metrics(
    OUT pipeline text,
    OUT metric text,
    OUT status_class text,
    OUT le text,
    OUT value double precision,
    OUT destination text)
RETURNS SETOF record
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_metrics';
COMMENT ON FUNCTION replicant._metrics() IS
    'API: Private. Live metrics behind replicant.metrics, for readers of that view';
-- Run with the privileges of whoever reads replicant.metrics; the function
-- checks that the reader may SELECT that view.
GRANT EXECUTE ON FUNCTION replicant._metrics() TO PUBLIC;

CREATE VIEW replicant.metrics AS
WITH live AS MATERIALIZED (SELECT * FROM replicant._metrics()),
pipeline AS (
    SELECT p.name::pg_catalog.text AS pipeline,
           pg_catalog.pg_wal_lsn_diff(CASE
                                          WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                                          ELSE pg_catalog.pg_current_wal_lsn()
                                      END, s.confirmed_flush_lsn) AS lag_bytes,
           pg_catalog.pg_wal_lsn_diff(CASE
                                          WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                                          ELSE pg_catalog.pg_current_wal_lsn()
                                      END, s.restart_lsn) AS retained_wal_bytes,
           s.safe_wal_size,
           -- the smallest budget: the first destination to give its hold up
           (SELECT pg_catalog.min(d.max_retained_wal) FROM replicant.destinations d
             WHERE d.pipeline_id OPERATOR(pg_catalog.=) p.id AND NOT d.slot_released) AS max_retained_wal
      FROM replicant.pipelines p
      LEFT JOIN pg_catalog.pg_replication_slots s
             ON s.slot_name OPERATOR(pg_catalog.=) p.slot_name
            AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
            AND s.plugin OPERATOR(pg_catalog.=) 'replicant'),
-- A destination's state: its pipeline's where the catalog decides it,
-- then its own halt, else what its sink's answers made it.  (No row of the
-- pipeline's: each destination's state is a series of its own, which the
-- alerts take one by one.)
destination AS (
    SELECT p.name::pg_catalog.text AS pipeline, d.name::pg_catalog.text AS destination,
           CASE
               WHEN pg_catalog.pg_is_in_recovery() THEN 7
               WHEN p.halt_reason IS NOT NULL THEN 4
               WHEN NOT p.enabled THEN 5
               WHEN p.resync_reason IS NOT NULL AND NOT p.resync_slot_dropped THEN 6
               WHEN p.resync_reason IS NOT NULL THEN 8
               WHEN d.halt_reason IS NOT NULL THEN 4
               ELSE coalesce((SELECT l.value FROM live l
                               WHERE l.pipeline OPERATOR(pg_catalog.=) p.name
                                 AND l.destination OPERATOR(pg_catalog.=) d.name
                                 AND l.metric OPERATOR(pg_catalog.=) 'replicant_state'), 0)
           END AS state
      FROM replicant.pipelines p
      JOIN replicant.destinations d ON d.pipeline_id OPERATOR(pg_catalog.=) p.id)
SELECT l.pipeline, l.metric, l.status_class, l.le, NULL::pg_catalog.text AS table_name, l.value,
       l.destination
  FROM live l
 WHERE l.metric OPERATOR(pg_catalog.<>) 'replicant_state'
UNION ALL
SELECT e.pipeline, 'replicant_state', NULL, NULL, NULL, e.state::pg_catalog.float8, e.destination
  FROM destination e
UNION ALL
SELECT g.pipeline, m.metric, NULL, NULL, NULL, m.value, NULL
  FROM pipeline g
 CROSS JOIN LATERAL (VALUES ('replicant_lag_bytes', g.lag_bytes::pg_catalog.float8),
                            ('replicant_retained_wal_bytes', g.retained_wal_bytes::pg_catalog.float8),
                            ('replicant_safe_wal_size_bytes', g.safe_wal_size::pg_catalog.float8),
                            ('replicant_max_retained_wal_bytes', g.max_retained_wal::pg_catalog.float8)) m(metric, value)
 WHERE m.value IS NOT NULL
UNION ALL
SELECT b.pipeline::pg_catalog.text, m.metric, NULL, NULL, b.table_name, m.value, NULL
  FROM (SELECT s.pipeline, pg_catalog.format('%I.%I', n.nspname, c.relname) AS table_name,
               sum(s.rows_done) AS rows_done, sum(s.rows_estimate) AS rows_estimate
          FROM replicant.backfill_status s
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s.relation
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
         WHERE s.state OPERATOR(pg_catalog.=) ANY ('{planned,running}')
         GROUP BY 1, 2) b
 CROSS JOIN LATERAL (VALUES ('replicant_backfill_rows_done', b.rows_done::pg_catalog.float8),
                            ('replicant_backfill_rows_estimated', b.rows_estimate::pg_catalog.float8)) m(metric, value)
 WHERE m.value IS NOT NULL;
COMMENT ON VIEW replicant.metrics IS
    'Counters and gauges per pipeline, metric, label set and destination, for Prometheus (README, "Monitoring")';
REVOKE ALL ON replicant.metrics FROM PUBLIC;
GRANT SELECT ON replicant.metrics TO pg_monitor, replicant_admin;

-- ---- A resync that cannot stream does not loop (issue 33 review): the
-- slot losses of a pipeline with on_slot_loss => 'resync' in a row, with no
-- stream batch delivered in between; past 3 the pipeline halts instead of
-- resyncing again.  resync_pipeline() starts the count over.
ALTER TABLE replicant.pipelines ADD COLUMN resync_losses integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN replicant.pipelines.resync_losses IS
    'API: Private. Slot losses in a row with no stream batch delivered in between (on_slot_loss => ''resync''); past 3 the pipeline halts.';

-- ---- The sink options leave replicant.pipelines (the section
-- "Destinations" above copied them): nothing reads them there any more.
ALTER TABLE replicant.pipelines
    DROP COLUMN sink_url, DROP COLUMN format, DROP COLUMN headers, DROP COLUMN secret,
    DROP COLUMN secret_previous, DROP COLUMN secret_previous_until, DROP COLUMN ca_file,
    DROP COLUMN batch_max_bytes, DROP COLUMN batch_max_transactions,
    DROP COLUMN http_timeout_ms, DROP COLUMN connect_timeout_ms, DROP COLUMN create_tables,
    DROP COLUMN max_retained_wal, DROP COLUMN on_slot_loss;

-- ---- Status per destination (issue 34; docs/destinations-design.md §1):
-- replicant.status keeps one row per pipeline, its sink columns rolled up
-- over the pipeline's destinations (_worker_status_v2() does that);
-- destination_status has one row per destination with those columns, for
-- whoever may read replicant.status.  Never the secret or the headers; the
-- sink URL as status shows it.
CREATE FUNCTION replicant._check_status_reader() RETURNS boolean
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_check_status_reader';
COMMENT ON FUNCTION replicant._check_status_reader() IS
    'API: Private. Raises an error unless the caller may read replicant.status';
GRANT EXECUTE ON FUNCTION replicant._check_status_reader() TO PUBLIC;

CREATE FUNCTION replicant._destination_status(
    OUT pipeline_id integer,
    OUT destination_id integer,
    OUT state text,
    OUT transactions_delivered bigint,
    OUT changes_delivered bigint,
    OUT batches_delivered bigint,
    OUT bytes_delivered bigint,
    OUT retries bigint,
    OUT last_delivery_at timestamptz,
    OUT last_error text,
    OUT sink_latency_ms double precision,
    OUT last_http_status integer,
    OUT next_retry_at timestamptz)
RETURNS SETOF record
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_destination_status';
COMMENT ON FUNCTION replicant._destination_status() IS
    'API: Private. Live state per destination behind replicant.destination_status, for readers of replicant.status';
-- Run with the privileges of whoever reads the view; the function checks
-- that the reader may SELECT replicant.status.
GRANT EXECUTE ON FUNCTION replicant._destination_status() TO PUBLIC;

-- behind_bytes: WAL from the destination's checkpoint to the furthest one
-- of its pipeline's destinations, what it trails the others by (0 with
-- one destination).  holds_slot: its checkpoint holds the slot's WAL, as
-- every destination's does but one that gave its hold up (past its
-- max_retained_wal), and none while the pipeline resyncs or once its slot
-- is gone or lost.
CREATE VIEW replicant.destination_status AS
SELECT p.name AS pipeline,
       d.name AS destination,
       CASE
           WHEN pg_catalog.pg_is_in_recovery() THEN 'standby'
           WHEN p.halt_reason IS NOT NULL THEN 'halted'
           WHEN NOT p.enabled THEN 'disabled'
           WHEN p.resync_reason IS NOT NULL AND NOT p.resync_slot_dropped THEN 'resync_pending'
           WHEN p.resync_reason IS NOT NULL THEN 'resyncing'
           WHEN d.halt_reason IS NOT NULL THEN 'halted'
           WHEN d.resync_reason IS NOT NULL THEN 'resyncing'
           ELSE coalesce(w.state, 'starting')
       END AS state,
       d.format,
       c.commit_lsn AS checkpoint_lsn,
       coalesce(w.transactions_delivered, 0) AS transactions_delivered,
       coalesce(w.changes_delivered, 0) AS changes_delivered,
       coalesce(w.batches_delivered, 0) AS batches_delivered,
       coalesce(w.bytes_delivered, 0) AS bytes_delivered,
       coalesce(w.retries, 0) AS retries,
       coalesce(w.last_delivery_at, c.updated_at) AS last_delivery_at,
       coalesce(p.halt_reason, p.resync_reason, d.halt_reason, w.last_error, d.resync_reason) AS last_error,
       replicant._sink_url(d.sink_url, p.owner) AS sink_url,
       w.sink_latency_ms,
       w.last_http_status,
       CASE WHEN p.halt_reason IS NULL AND d.halt_reason IS NULL AND p.enabled THEN w.next_retry_at END AS next_retry_at,
       d.max_retained_wal,
       pg_catalog.pg_wal_lsn_diff(
           pg_catalog.max(c.end_lsn) OVER (PARTITION BY p.id),
           c.end_lsn)::bigint AS behind_bytes,
       (NOT d.slot_released AND p.resync_reason IS NULL AND s.slot_name IS NOT NULL
        AND s.wal_status IS DISTINCT FROM 'lost') AS holds_slot
  FROM replicant.pipelines p
  JOIN replicant.destinations d ON d.pipeline_id = p.id
  LEFT JOIN replicant.checkpoints c ON c.destination_id = d.id
  LEFT JOIN pg_catalog.pg_replication_slots s
         ON s.slot_name = p.slot_name
        AND s.database = pg_catalog.current_database()
        AND s.plugin = 'replicant'
  LEFT JOIN replicant._destination_status() w ON w.destination_id = d.id
 WHERE replicant._check_status_reader();
COMMENT ON VIEW replicant.destination_status IS
    'One row per destination of a pipeline: its state, checkpoint, counters and sink, for whoever may read replicant.status';
GRANT SELECT ON replicant.destination_status TO PUBLIC;

-- Running workers' destinations get their names (the views above join by
-- them) from a sync once this update commits.
CREATE FUNCTION replicant._request_sync() RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_request_sync';
COMMENT ON FUNCTION replicant._request_sync() IS
    'API: Private. Has the database''s pipelines mirrored into shared memory again once the transaction commits';
REVOKE ALL ON FUNCTION replicant._request_sync() FROM PUBLIC;
SELECT replicant._request_sync();

-- ---- Several destinations (issue 34; docs/destinations-design.md §1):
-- add_destination and drop_destination; a destination halts alone
-- (replicant.destinations.halt_reason, written by the worker) and
-- resume_pipeline(name, destination) resumes it alone.  A new destination
-- gets what commits after the call (its checkpoint is the WAL insert
-- position once the worker stopped), and with snapshot => 'incremental' a
-- backfill of every table for it alone.
CREATE FUNCTION replicant.add_destination(
    pipeline                text,
    name                    text,
    sink_url                text,
    format                  text DEFAULT 'replicant',
    snapshot                text DEFAULT 'none',
    batch_max_bytes         integer DEFAULT 8388608,
    batch_max_transactions  integer DEFAULT 10000,
    http_timeout_ms         integer DEFAULT 30000,
    connect_timeout_ms      integer DEFAULT 5000,
    headers                 jsonb DEFAULT '{}',
    secret                  text DEFAULT NULL,
    ca_file                 text DEFAULT NULL,
    create_tables           boolean DEFAULT false,
    max_retained_wal        text DEFAULT NULL,
    on_slot_loss            text DEFAULT 'halt')
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_add_destination';
COMMENT ON FUNCTION replicant.add_destination(text, text, text, text, text, integer, integer, integer, integer, jsonb, text, text, boolean, text, text) IS
    'Adds a destination to a pipeline: it receives what commits after the call (snapshot => ''incremental'': and every table''s rows)';

CREATE FUNCTION replicant.drop_destination(pipeline text, name text) RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_drop_destination';
COMMENT ON FUNCTION replicant.drop_destination(text, text) IS
    'Removes a destination of a pipeline (not its last one) and its checkpoint';

-- resume_pipeline gains the destination to resume alone (NULL: the pipeline
-- and every destination, as before).
DROP FUNCTION replicant.resume_pipeline(text);
CREATE FUNCTION replicant.resume_pipeline(name text, destination text DEFAULT NULL) RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_resume_pipeline';
COMMENT ON FUNCTION replicant.resume_pipeline(text, text) IS
    'Clears a fail-closed halt of the pipeline, or of one of its destinations, once its cause is fixed';

-- backfill gains the destination to read the table for alone (NULL: every
-- destination, as before).
DROP FUNCTION replicant.backfill(text, regclass, text);
CREATE FUNCTION replicant.backfill(pipeline text, relation regclass, mode text DEFAULT 'auto',
                                   destination text DEFAULT NULL) RETURNS bigint
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_backfill';
COMMENT ON FUNCTION replicant.backfill(text, regclass, text, text) IS
    'Reads a published table''s rows into a streaming pipeline, beside the stream, for every destination or the one named; returns the backfill id';

REVOKE ALL ON FUNCTION
    replicant.add_destination(text, text, text, text, text, integer, integer, integer, integer, jsonb, text, text, boolean, text, text),
    replicant.drop_destination(text, text),
    replicant.resume_pipeline(text, text),
    replicant.backfill(text, regclass, text, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    replicant.add_destination(text, text, text, text, text, integer, integer, integer, integer, jsonb, text, text, boolean, text, text),
    replicant.drop_destination(text, text),
    replicant.resume_pipeline(text, text),
    replicant.backfill(text, regclass, text, text)
TO replicant_admin;

-- ---- Privileges nobody granted on purpose (keep this section last: it
-- covers every object made above).  Default privileges of the installing
-- role (ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO ..., global or
-- for the schema) give each table made above to their grantees, and
-- pg_monitor has USAGE on the schema: replicant.pipelines holds secrets.
-- So, at every installation and update, nobody but a table's or sequence's
-- owner keeps any privilege on it (views keep their grants: they show only
-- what is safe to show); a function this transaction made is executable
-- only by its owner, PUBLIC and replicant_admin, as granted above.
GRANT EXECUTE ON FUNCTION replicant._sink_url(text, oid) TO PUBLIC;   -- the status view calls it
DO $$
DECLARE
    target record;
    admin pg_catalog.oid := coalesce((SELECT oid FROM pg_catalog.pg_roles
                                       WHERE rolname OPERATOR(pg_catalog.=) 'replicant_admin'), 0);
BEGIN
    FOR target IN
        SELECT DISTINCT CASE c.relkind WHEN 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END
                            OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text AS object,
               a.grantee
          FROM pg_catalog.pg_class c
          CROSS JOIN LATERAL (SELECT x.grantee FROM pg_catalog.aclexplode(c.relacl) x
                              UNION ALL
                              SELECT x.grantee
                                FROM pg_catalog.pg_attribute t, pg_catalog.aclexplode(t.attacl) x
                               WHERE t.attrelid OPERATOR(pg_catalog.=) c.oid) a
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'replicant'::pg_catalog.regnamespace
           AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,S}')
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
        UNION
        SELECT DISTINCT 'FUNCTION ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text,
               a.grantee
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'replicant'::pg_catalog.regnamespace
           AND replicant._xid_is_current(p.xmin)
           AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[p.proowner, 0, admin])
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s CASCADE', target.object,
                                  CASE WHEN target.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                       ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(target.grantee)) END);
    END LOOP;
END
$$;
