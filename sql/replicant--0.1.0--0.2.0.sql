-- replicant 0.1.0 -> 0.2.0
--
-- A new installation runs replicant--0.1.0.sql and then this script, so
-- every change to the SQL objects of 0.2.0 is written here once.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

-- ---- Locks first, in the order a worker's checkpoint transaction takes
-- them (checkpoints, then table_shapes, then pipelines through their foreign
-- keys): an update that locked pipelines first could deadlock with it, and
-- the deadlock detector would end the worker after its sink had acknowledged
-- a batch not yet checkpointed, which the next worker sends again.
LOCK TABLE replicant.checkpoints, replicant.table_shapes, replicant.pipelines
    IN ACCESS EXCLUSIVE MODE;

-- ---- format => 'clickhouse': the target tables' DDL (README: "ClickHouse").
CREATE FUNCTION replicant.sink_ddl(pipeline text)
RETURNS SETOF text
LANGUAGE C STABLE
AS 'MODULE_PATHNAME', 'replicant_sink_ddl';
COMMENT ON FUNCTION replicant.sink_ddl(text) IS
    'The ClickHouse CREATE TABLE statement for each table the pipeline publishes';
REVOKE ALL ON FUNCTION replicant.sink_ddl(text) FROM PUBLIC;

-- ---- Privileges: every function runs with search_path pinned, so no object
-- of the caller's (an operator or function shadowing a built-in one) takes
-- part in what the extension runs with raised rights.  This covers every
-- function the extension has at this point, whatever its signature; a
-- function created further down must say SET search_path = pg_catalog,
-- pg_temp itself (test/t/011_search_path.pl checks every function).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d
            ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.objid OPERATOR(pg_catalog.=) p.oid
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
          JOIN pg_catalog.pg_extension e
            ON e.oid OPERATOR(pg_catalog.=) d.refobjid
           AND e.extname OPERATOR(pg_catalog.=) 'replicant'
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f);
    END LOOP;
END
$$;

-- ---- await_delivered without an LSN waits for the session's own last
-- commit too, which is not written to WAL yet when it was asynchronous
-- (pg_current_wal_lsn(), the old default, could be before it).
CREATE OR REPLACE FUNCTION replicant.await_delivered(
    pipeline    text,
    lsn         pg_lsn DEFAULT NULL,
    timeout_ms  integer DEFAULT 10000)
RETURNS boolean
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_await_delivered';
COMMENT ON FUNCTION replicant.await_delivered(text, pg_lsn, integer) IS
    'Waits until the sink acknowledged everything the pipeline delivers up to lsn (default: this session''s commits and the WAL written before the call); false at the timeout';

-- ---- Failover slots and standbys (PostgreSQL 17+ failover, all versions standby)
-- create_pipeline(..., failover => true) makes the slot a failover slot, which
-- sync_replication_slots copies to physical standbys; replicant.status reads
-- on a server in recovery and shows state 'standby' there.
ALTER TABLE replicant.pipelines ADD COLUMN failover boolean NOT NULL DEFAULT false;

DROP FUNCTION replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text);
DROP FUNCTION replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text);

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
    format                  text DEFAULT 'replicant')
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_create_pipeline';
COMMENT ON FUNCTION replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text) IS
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
    format                  text DEFAULT 'replicant')
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_create_pipeline';
COMMENT ON FUNCTION replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text) IS
    'Creates a pipeline streaming one publication''s changes to sink_url';

REVOKE ALL ON FUNCTION
    replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text),
    replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text, boolean, text)
FROM PUBLIC;

-- In recovery no worker runs and pg_current_wal_lsn() raises an error: the
-- state is 'standby' and the lag is measured against the replayed WAL.
CREATE OR REPLACE VIEW replicant.status AS
SELECT p.name AS pipeline,
       CASE
           WHEN pg_catalog.pg_is_in_recovery() THEN 'standby'
           WHEN p.halt_reason IS NOT NULL THEN 'halted'
           WHEN NOT p.enabled THEN 'disabled'
           ELSE coalesce(w.state, 'starting')
       END AS state,
       ('replicant_' || p.name)::name AS slot_name,
       c.commit_lsn AS checkpoint_lsn,
       s.confirmed_flush_lsn,
       pg_wal_lsn_diff(CASE
                           WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                           ELSE pg_catalog.pg_current_wal_lsn()
                       END, s.confirmed_flush_lsn)::bigint AS lag_bytes,
       coalesce(w.transactions_delivered, 0) AS transactions_delivered,
       coalesce(w.changes_delivered, 0) AS changes_delivered,
       coalesce(w.batches_delivered, 0) AS batches_delivered,
       coalesce(w.bytes_delivered, 0) AS bytes_delivered,
       coalesce(w.retries, 0) AS retries,
       coalesce(w.last_delivery_at, c.updated_at) AS last_delivery_at,
       coalesce(p.halt_reason, w.last_error) AS last_error,
       w.worker_pid,
       replicant._redact_url(p.sink_url) AS sink_url,
       w.sink_latency_ms,
       w.last_http_status,
       p.publications
  FROM replicant.pipelines p
  LEFT JOIN replicant.checkpoints c ON c.pipeline_id = p.id
  LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = 'replicant_' || p.name
  LEFT JOIN replicant._worker_status() w ON w.pipeline_id = p.id;

-- ---- The first hour (issue 11): a role to manage pipelines, status without
-- ---- EXECUTE on internals, secrets, pipeline definitions ------------------

-- replicant.status runs _worker_status() with the reader's privileges; the
-- function now checks that the reader may SELECT replicant.status instead.
GRANT EXECUTE ON FUNCTION replicant._worker_status() TO PUBLIC;
COMMENT ON FUNCTION replicant._worker_status() IS
    'API: Private. Live worker state behind replicant.status, for readers of that view';

CREATE FUNCTION replicant.generate_secret() RETURNS text
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_generate_secret';
COMMENT ON FUNCTION replicant.generate_secret() IS
    'Returns a new signing secret: ''whsec_'' and the base64 of 24 strong random bytes';

CREATE FUNCTION replicant.pipeline_definitions(include_secrets boolean DEFAULT false)
RETURNS SETOF text
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_pipeline_definitions';
COMMENT ON FUNCTION replicant.pipeline_definitions(boolean) IS
    'The create_pipeline calls that recreate the caller''s pipelines (after pg_dump/pg_restore); secrets and header values only if asked for';
REVOKE ALL ON FUNCTION replicant.pipeline_definitions(boolean) FROM PUBLIC;

-- ---- Wire formats (issue 15): format => 'replicant' (replicant's own
-- JSON), 'cloudevents', ...; create_pipeline above takes it, alter_pipeline
-- changes it.
ALTER TABLE replicant.pipelines ADD COLUMN format text NOT NULL DEFAULT 'replicant';

DROP FUNCTION replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text);

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
    format                  text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_alter_pipeline';
COMMENT ON FUNCTION replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text, text) IS
    'Changes a pipeline''s options; NULL leaves an option as it is; the worker restarts with them';
REVOKE ALL ON FUNCTION
    replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text, text)
FROM PUBLIC;

-- replicant_admin: what managing pipelines needs, as pg_monitor is for
-- monitoring.  Members manage the pipelines of roles whose privileges they
-- have.  Roles are cluster-wide, so it may exist from another database.
-- Keep this block last: it grants every management function defined above.
DO $$
DECLARE
    f regprocedure;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                    WHERE rolname OPERATOR(pg_catalog.=) 'replicant_admin') THEN
        CREATE ROLE replicant_admin NOLOGIN;
        COMMENT ON ROLE replicant_admin IS
            'Can manage replicant pipelines: create, alter, enable, disable, resume, drop, backfill, read the views';
    END IF;
    GRANT USAGE ON SCHEMA replicant TO replicant_admin;
    GRANT SELECT ON replicant.status, replicant.backfill_status TO replicant_admin;
    FOR f IN SELECT p.oid::regprocedure
               FROM pg_catalog.pg_proc p
              WHERE p.pronamespace OPERATOR(pg_catalog.=) 'replicant'::regnamespace
                AND p.proname OPERATOR(pg_catalog.!~) '^_'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO replicant_admin', f);
    END LOOP;
END
$$;

-- Publications added by alter_pipeline apply from the WAL position of the
-- call on: publication_lsns[i] is where publications[i] starts to count
-- (NULL: all of them from the start).  Decoding positions before that see
-- the publication as empty, whether or not it existed there yet.
ALTER TABLE replicant.pipelines ADD COLUMN publication_lsns pg_lsn[];
COMMENT ON COLUMN replicant.pipelines.publication_lsns IS
    'API: Private. Per publication, the WAL position from which it is delivered.';
