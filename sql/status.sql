-- replicant.status: the contract's columns and types, and redaction.
\set VERBOSITY terse
CREATE EXTENSION replicant;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'replicant.status'::regclass AND attnum > 0
 ORDER BY attnum;

CREATE TABLE t (id int PRIMARY KEY);
CREATE PUBLICATION pub FOR TABLE t;
SELECT replicant.create_pipeline('quiet', 'pub', 'http://127.0.0.1:9/path?q=1');
SELECT pipeline,
       replace(slot_name, (SELECT oid::text FROM pg_database WHERE datname = current_database()), '<dboid>') AS slot_name,
       checkpoint_lsn, confirmed_flush_lsn IS NOT NULL AS has_slot,
       lag_bytes >= 0 AS lag_ok, transactions_delivered, changes_delivered,
       batches_delivered, bytes_delivered, sink_url, publications,
       retained_wal_bytes >= 0 AS retains, wal_status, safe_wal_size, max_retained_wal, wal_warning
  FROM replicant.status;
-- the budget; far from it (and without max_slot_wal_keep_size), no warning
SELECT replicant.alter_pipeline('quiet', max_retained_wal => '1TB');
SELECT max_retained_wal, wal_status, safe_wal_size, wal_warning FROM replicant.status;
SELECT replicant.disable_pipeline('quiet');
SELECT pipeline, state FROM replicant.status;
SELECT replicant._redact_url('https://user:secret@example.com:8443/p?q=a@b');
SELECT replicant._redact_url('http://127.0.0.1:9/no-credentials@here');
-- status.sink_url: without credentials to the owner, scheme://host[:port] to others
CREATE ROLE watcher;
GRANT USAGE ON SCHEMA replicant TO watcher;
GRANT SELECT ON replicant.status TO watcher;
SET ROLE watcher;
SELECT u, replicant._sink_url(u, 'watcher'::regrole) AS owner_sees,
       replicant._sink_url(u, 10) AS others_see
  FROM (VALUES ('https://user:secret@example.com:8443/p?q=a@b'),
               ('http://[::1]:8080?token=x'),
               ('http://host#frag'),
               ('https://sink.example')) v(u);
SELECT sink_url FROM replicant.status;
-- the slot's cost, to whoever may read status
SELECT retained_wal_bytes >= 0 AS retains, wal_status, max_retained_wal, wal_warning FROM replicant.status;
RESET ROLE;
REVOKE SELECT ON replicant.status FROM watcher;
REVOKE USAGE ON SCHEMA replicant FROM watcher;
SELECT replicant.drop_pipeline('quiet');
SELECT count(*) FROM replicant.status;
DROP PUBLICATION pub;
DROP TABLE t;
DROP EXTENSION replicant;
DROP ROLE watcher;
