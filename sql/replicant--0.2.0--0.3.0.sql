-- replicant 0.2.0 -> 0.3.0
--
-- A new installation runs replicant--0.1.0.sql, replicant--0.1.0--0.2.0.sql
-- and then this script, so every change to the SQL objects of 0.3.0 is
-- written here once.  A function created here says SET search_path =
-- pg_catalog, pg_temp itself (test/t/011_search_path.pl checks every
-- function), and one meant for replicant_admin is granted to it here.
\echo Use "ALTER EXTENSION replicant UPDATE" to load this file. \quit

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
