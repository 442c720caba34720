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
