-- replicant 0.1.0 -> 0.2.0
--
-- A new installation runs replicant--0.1.0.sql and then this script, so
-- every change to the SQL objects of 0.2.0 is written here once.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

-- Publications added by alter_pipeline apply from the WAL position of the
-- call on: publication_lsns[i] is where publications[i] starts to count
-- (NULL: all of them from the start).  Decoding positions before that see
-- the publication as empty, whether or not it existed there yet.
ALTER TABLE replicant.pipelines ADD COLUMN publication_lsns pg_lsn[];
COMMENT ON COLUMN replicant.pipelines.publication_lsns IS
    'API: Private. Per publication, the WAL position from which it is delivered.';
