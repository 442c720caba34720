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
