-- replicant 0.1.0: stream committed changes to HTTP sinks.
\echo Use "CREATE EXTENSION replicant" to load this file. \quit

-- API: Private. The pipeline catalog. It holds secrets, so PUBLIC can never
-- read it; the views below show what is safe to show.
CREATE TABLE replicant.pipelines (
    id                      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                    text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9_]{1,48}$'),
    owner                   oid NOT NULL,
    publications            text[] NOT NULL,
    sink_url                text NOT NULL,
    snapshot                text NOT NULL,
    enabled                 boolean NOT NULL DEFAULT true,
    halt_reason             text,
    halt_lsn                pg_lsn,     -- the commit whose change halted the pipeline
    resumed_lsn             pg_lsn,     -- WAL position of the last resume_pipeline
    config_version          integer NOT NULL DEFAULT 1,
    batch_max_bytes         integer NOT NULL,
    batch_max_transactions  integer NOT NULL,
    http_timeout_ms         integer NOT NULL,
    connect_timeout_ms      integer NOT NULL,
    headers                 jsonb NOT NULL,
    secret                  text,
    snapshot_workers        integer NOT NULL,
    messages                boolean NOT NULL DEFAULT false,
    message_prefixes        text[],
    secret_previous         text,
    secret_previous_until   timestamptz,
    ca_file                 text,
    created_at              timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON replicant.pipelines FROM PUBLIC;
COMMENT ON TABLE replicant.pipelines IS
    'API: Private. One row per pipeline; holds secrets, never granted to PUBLIC.';

-- API: Private. The delivery checkpoint: the last commit the sink acknowledged.
CREATE TABLE replicant.checkpoints (
    pipeline_id integer PRIMARY KEY REFERENCES replicant.pipelines ON DELETE CASCADE,
    commit_lsn  pg_lsn NOT NULL,
    end_lsn     pg_lsn NOT NULL,
    updated_at  timestamptz NOT NULL
);
REVOKE ALL ON replicant.checkpoints FROM PUBLIC;
COMMENT ON TABLE replicant.checkpoints IS
    'API: Private. Last commit LSN acknowledged by the sink, per pipeline.';

-- API: Private. Each table's shape (replica identity, key and live columns) as
-- of the checkpoint: the baseline a destructive schema change is detected
-- against, across worker restarts.
CREATE TABLE replicant.table_shapes (
    pipeline_id integer NOT NULL REFERENCES replicant.pipelines ON DELETE CASCADE,
    relid       oid NOT NULL,
    shape       text NOT NULL,
    PRIMARY KEY (pipeline_id, relid)
);
REVOKE ALL ON replicant.table_shapes FROM PUBLIC;
COMMENT ON TABLE replicant.table_shapes IS
    'API: Private. Table shapes delivered up to the checkpoint, per pipeline.';

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
    ca_file                 text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'replicant_create_pipeline';
COMMENT ON FUNCTION replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text) IS
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
    ca_file                 text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'replicant_create_pipeline';
COMMENT ON FUNCTION replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text) IS
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
    ca_file                 text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'replicant_alter_pipeline';
COMMENT ON FUNCTION replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text) IS
    'Changes a pipeline''s options; NULL leaves an option as it is; the worker restarts with them';

CREATE FUNCTION replicant.enable_pipeline(name text) RETURNS void
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_enable_pipeline';
COMMENT ON FUNCTION replicant.enable_pipeline(text) IS 'Starts a disabled pipeline';

CREATE FUNCTION replicant.disable_pipeline(name text) RETURNS void
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_disable_pipeline';
COMMENT ON FUNCTION replicant.disable_pipeline(text) IS
    'Stops a pipeline''s worker; its slot keeps retaining WAL until it is enabled or dropped';

CREATE FUNCTION replicant.resume_pipeline(name text) RETURNS void
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_resume_pipeline';
COMMENT ON FUNCTION replicant.resume_pipeline(text) IS
    'Clears a fail-closed halt once the operator has fixed its cause';

CREATE FUNCTION replicant.drop_pipeline(name text) RETURNS void
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_drop_pipeline';
COMMENT ON FUNCTION replicant.drop_pipeline(text) IS
    'Stops the worker and drops the pipeline''s slot and state';

CREATE FUNCTION replicant.backfill(pipeline text, relation regclass, mode text DEFAULT 'auto')
RETURNS bigint
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_backfill';
COMMENT ON FUNCTION replicant.backfill(text, regclass, text) IS
    'Reads a published table''s rows into a streaming pipeline, beside the stream; returns the backfill id';

CREATE FUNCTION replicant.cancel_backfill(id bigint) RETURNS void
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_cancel_backfill';
COMMENT ON FUNCTION replicant.cancel_backfill(bigint) IS 'Stops a planned or running backfill';

CREATE FUNCTION replicant.await_delivered(
    pipeline    text,
    lsn         pg_lsn DEFAULT pg_current_wal_lsn(),
    timeout_ms  integer DEFAULT 10000)
RETURNS boolean
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'replicant_await_delivered';
COMMENT ON FUNCTION replicant.await_delivered(text, pg_lsn, integer) IS
    'Waits until the sink acknowledged everything the pipeline delivers up to lsn; false at the timeout';

REVOKE ALL ON FUNCTION
    replicant.await_delivered(text, pg_lsn, integer),
    replicant.backfill(text, regclass, text),
    replicant.cancel_backfill(bigint),
    replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text),
    replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text),
    replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text),
    replicant.enable_pipeline(text),
    replicant.disable_pipeline(text),
    replicant.resume_pipeline(text),
    replicant.drop_pipeline(text)
FROM PUBLIC;

-- API: Private. One row per table read by a snapshot or a backfill.
CREATE TABLE replicant.backfills (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pipeline_id   integer NOT NULL REFERENCES replicant.pipelines ON DELETE CASCADE,
    relid         oid NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('initial', 'incremental')),
    mode          text NOT NULL CHECK (mode IN ('keyset', 'bitmap', 'ctid')),
    state         text NOT NULL DEFAULT 'planned'
                  CHECK (state IN ('planned', 'running', 'done', 'cancelled', 'failed')),
    rows_done     bigint NOT NULL DEFAULT 0,
    rows_estimate bigint NOT NULL DEFAULT 0,
    relfilenode   oid NOT NULL,
    cursor_key    text[],           -- keyset: the last key delivered
    next_block    bigint NOT NULL DEFAULT 0,    -- ctid: first block not delivered
    bounds        text[],           -- bitmap: sub-range boundaries
    next_range    integer NOT NULL DEFAULT 0,   -- bitmap: first range not delivered
    first_sent    boolean NOT NULL DEFAULT false,
    started_at    timestamptz,
    finished_at   timestamptz
);
REVOKE ALL ON replicant.backfills FROM PUBLIC;
COMMENT ON TABLE replicant.backfills IS
    'API: Private. Tables read by snapshots and backfills, with their progress.';

-- API: Private. Block ranges of a table that snapshot workers read in parallel.
CREATE TABLE replicant.snapshot_shards (
    backfill_id bigint NOT NULL REFERENCES replicant.backfills ON DELETE CASCADE,
    shard       integer NOT NULL,
    lo_block    bigint NOT NULL,
    hi_block    bigint,             -- NULL: to the end of the table
    next_block  bigint NOT NULL,    -- blocks before it were delivered
    claimed     boolean NOT NULL DEFAULT false,
    done        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (backfill_id, shard)
);
REVOKE ALL ON replicant.snapshot_shards FROM PUBLIC;
COMMENT ON TABLE replicant.snapshot_shards IS
    'API: Private. Durable per-shard progress of initial snapshots.';

-- API: Private. Live state of the workers, from shared memory.
CREATE FUNCTION replicant._worker_status(
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
    OUT last_http_status integer)
RETURNS SETOF record
LANGUAGE C STRICT VOLATILE
AS 'MODULE_PATHNAME', 'replicant_worker_status';
REVOKE ALL ON FUNCTION replicant._worker_status() FROM PUBLIC;

-- API: Private. Shows a URL without its user information.
CREATE FUNCTION replicant._redact_url(url text) RETURNS text
LANGUAGE C STRICT IMMUTABLE
AS 'MODULE_PATHNAME', 'replicant_redact_url';

CREATE VIEW replicant.status AS
SELECT p.name AS pipeline,
       CASE
           WHEN p.halt_reason IS NOT NULL THEN 'halted'
           WHEN NOT p.enabled THEN 'disabled'
           ELSE coalesce(w.state, 'starting')
       END AS state,
       ('replicant_' || p.name)::name AS slot_name,
       c.commit_lsn AS checkpoint_lsn,
       s.confirmed_flush_lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint AS lag_bytes,
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
COMMENT ON VIEW replicant.status IS
    'One row per pipeline: state, positions, counters and the last value-free error';

CREATE VIEW replicant.backfill_status AS
SELECT b.id,
       p.name AS pipeline,
       b.relid::regclass AS relation,
       b.mode,
       b.state,
       b.rows_done,
       b.rows_estimate,
       CASE
           WHEN b.state = 'done' THEN 100.0
           WHEN b.rows_estimate > 0 THEN least(100.0, round(100.0 * b.rows_done / b.rows_estimate, 1))
           ELSE 0.0
       END AS percent,
       b.started_at,
       b.finished_at
  FROM replicant.backfills b
  JOIN replicant.pipelines p ON p.id = b.pipeline_id;
COMMENT ON VIEW replicant.backfill_status IS
    'One row per table read by a snapshot or backfill: mode, state and progress';

-- API: Private, for tests. Encodes a row exactly as the stream and snapshot paths do.
CREATE FUNCTION replicant._encode_row(record) RETURNS text
LANGUAGE C STRICT STABLE
AS 'MODULE_PATHNAME', 'replicant_encode_row';
REVOKE ALL ON FUNCTION replicant._encode_row(record) FROM PUBLIC;
