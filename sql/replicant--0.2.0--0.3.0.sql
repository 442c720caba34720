-- replicant 0.2.0 -> 0.3.0
--
-- A new installation runs replicant--0.1.0.sql, replicant--0.1.0--0.2.0.sql
-- and then this script, so every change to the SQL objects of 0.3.0 is
-- written here once.  A function created here says SET search_path =
-- pg_catalog, pg_temp itself (test/t/011_search_path.pl checks every
-- function), and one meant for replicant_admin is granted to it here.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

-- ---- Slot names are cluster-wide, pipeline names per database: a new
-- pipeline's slot is replicant_<database OID>_<name> (a name too long for
-- that keeps its start and gets its hash), and the row records it.  Existing
-- pipelines keep the slot they have, replicant_<name>: the update re-delivers
-- and loses nothing.  replicant never decodes, adopts or drops a slot of
-- another database or another output plugin, whatever its name.
ALTER TABLE replicant.pipelines ADD COLUMN slot_name name;
UPDATE replicant.pipelines SET slot_name = ('replicant_' || name)::name;
ALTER TABLE replicant.pipelines ALTER COLUMN slot_name SET NOT NULL;
ALTER TABLE replicant.pipelines ADD CONSTRAINT pipelines_slot_name_key UNIQUE (slot_name);
COMMENT ON COLUMN replicant.pipelines.slot_name IS
    'API: Private. The pipeline''s replication slot: replicant_<database OID>_<name>, or replicant_<name> for a pipeline created before 0.3.0.';

-- ---- replicant.status shows a sink URL's path and query (where tokens often
-- live) only to the pipeline's owner (its members, superusers); every other
-- reader sees scheme://host[:port].
CREATE FUNCTION replicant._sink_url(url text, owner oid) RETURNS text
LANGUAGE C STRICT STABLE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'replicant_sink_url';
COMMENT ON FUNCTION replicant._sink_url(text, oid) IS
    'API: Private. A sink URL as replicant.status shows it to the reader: without credentials to the owner, scheme://host[:port] to anyone else';

-- The view with both: the slot the row names, and only if it is of this
-- database and replicant's plugin; the sink URL as the reader may see it.
CREATE OR REPLACE VIEW replicant.status AS
SELECT p.name AS pipeline,
       CASE
           WHEN pg_catalog.pg_is_in_recovery() THEN 'standby'
           WHEN p.halt_reason IS NOT NULL THEN 'halted'
           WHEN NOT p.enabled THEN 'disabled'
           ELSE coalesce(w.state, 'starting')
       END AS state,
       p.slot_name COLLATE pg_catalog."default" AS slot_name,  -- as 0.2.0's column
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
       replicant._sink_url(p.sink_url, p.owner) AS sink_url,
       w.sink_latency_ms,
       w.last_http_status,
       p.publications
  FROM replicant.pipelines p
  LEFT JOIN replicant.checkpoints c ON c.pipeline_id = p.id
  LEFT JOIN pg_catalog.pg_replication_slots s
         ON s.slot_name = p.slot_name
        AND s.database = pg_catalog.current_database()
        AND s.plugin = 'replicant'
  LEFT JOIN replicant._worker_status() w ON w.pipeline_id = p.id;

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
