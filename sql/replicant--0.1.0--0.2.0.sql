-- replicant 0.1.0 -> 0.2.0
--
-- A new installation runs replicant--0.1.0.sql and then this script, so
-- every change to the SQL objects of 0.2.0 is written here once.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit
