-- replicant 0.1.0 -> 0.2.0
--
-- A new installation runs replicant--0.1.0.sql and then this script, so
-- every change to the SQL objects of 0.2.0 is written here once.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

-- Privileges: every function runs with search_path pinned, so no object of
-- the caller's (an operator or function shadowing a built-in one) can take
-- part in what the extension runs with raised rights.  A function added
-- below must say SET search_path = pg_catalog, pg_temp too
-- (test/t/011_search_path.pl checks every function of the extension).
ALTER FUNCTION replicant.create_pipeline(text, text[], text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text)
    SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.create_pipeline(text, text, text, text, integer, integer, integer, integer, jsonb, text, integer, boolean, text[], text)
    SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.alter_pipeline(text, text[], text, integer, integer, integer, integer, jsonb, text, boolean, boolean, text[], timestamptz, text)
    SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.enable_pipeline(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.disable_pipeline(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.resume_pipeline(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.drop_pipeline(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.backfill(text, regclass, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.cancel_backfill(bigint) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant.await_delivered(text, pg_lsn, integer) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant._worker_status() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant._redact_url(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION replicant._encode_row(record) SET search_path = pg_catalog, pg_temp;
