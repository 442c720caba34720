-- replicant 0.2.0 -> 0.3.0
--
-- A new installation runs replicant--0.1.0.sql, replicant--0.1.0--0.2.0.sql
-- and then this script, so every change to the SQL objects of 0.3.0 is
-- written here once.  A function created here says SET search_path =
-- pg_catalog, pg_temp itself (test/t/011_search_path.pl checks every
-- function), and one meant for replicant_admin is granted to it here.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

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

-- rows_done (and percent) add those rows while the shard's recorded
-- position is still the start of the window they come from.
CREATE OR REPLACE VIEW replicant.backfill_status AS
SELECT b.id,
       p.name AS pipeline,
       b.relid::regclass AS relation,
       b.mode,
       b.state,
       b.rows_done + coalesce(w.rows_done, 0) AS rows_done,
       b.rows_estimate,
       CASE
           WHEN b.state = 'done' THEN 100.0
           WHEN b.rows_estimate > 0
               THEN least(100.0, round(100.0 * (b.rows_done + coalesce(w.rows_done, 0)) / b.rows_estimate, 1))
           ELSE 0.0
       END AS percent,
       b.started_at,
       b.finished_at
  FROM replicant.backfills b
  JOIN replicant.pipelines p ON p.id = b.pipeline_id
  LEFT JOIN (SELECT s.backfill_id, sum(l.rows_done)::bigint AS rows_done
               FROM replicant._snapshot_progress() l
               JOIN replicant.snapshot_shards s
                 ON s.backfill_id = l.backfill_id AND s.shard = l.shard
                AND s.next_block = l.next_block AND NOT s.done
              GROUP BY s.backfill_id) w ON w.backfill_id = b.id;
COMMENT ON VIEW replicant.backfill_status IS
    'One row per table read by a snapshot or backfill: mode, state and progress';
