-- replicant 0.1.0 -> 0.2.0
--
-- A new installation runs replicant--0.1.0.sql and then this script, so
-- every change to the SQL objects of 0.2.0 is written here once.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

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
