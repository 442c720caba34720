-- replicant.status: the contract's columns and types, and redaction;
-- replicant.destination_status beside it, and replicant.metrics' columns.
\set VERBOSITY terse
CREATE EXTENSION replicant;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'replicant.status'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'replicant.destination_status'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'replicant.metrics'::regclass AND attnum > 0
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
-- one destination: its row shows what the pipeline's does (no worker
-- runs: the counters hold still)
SELECT pipeline, destination, state, format, checkpoint_lsn, transactions_delivered,
       changes_delivered, batches_delivered, bytes_delivered, sink_url,
       behind_bytes, holds_slot, max_retained_wal
  FROM replicant.destination_status;
SELECT count(*) AS same_as_status
  FROM replicant.status s JOIN replicant.destination_status d ON d.pipeline = s.pipeline
 WHERE (s.pipeline, s.state, s.checkpoint_lsn, s.transactions_delivered, s.changes_delivered,
        s.batches_delivered, s.bytes_delivered, s.retries, s.last_delivery_at, s.last_error,
        s.sink_url, s.sink_latency_ms, s.last_http_status, s.next_retry_at, s.max_retained_wal)
       IS NOT DISTINCT FROM
       (d.pipeline, d.state, d.checkpoint_lsn, d.transactions_delivered, d.changes_delivered,
        d.batches_delivered, d.bytes_delivered, d.retries, d.last_delivery_at, d.last_error,
        d.sink_url, d.sink_latency_ms, d.last_http_status, d.next_retry_at, d.max_retained_wal);
-- three destinations: replicant.status keeps one row per pipeline, the
-- floor as checkpoint_lsn (none while one has none), no sink URL, the
-- smallest budget; destination_status a row per destination
SELECT replicant.add_destination('quiet', 'search', 'http://127.0.0.1:9/s', max_retained_wal => '2GB');
SELECT replicant.add_destination('quiet', 'cache', 'http://127.0.0.1:9/c');
SELECT pipeline, state, checkpoint_lsn, sink_url, max_retained_wal, last_error FROM replicant.status;
SELECT pipeline, destination, state, format, checkpoint_lsn IS NOT NULL AS has_checkpoint, sink_url,
       behind_bytes >= 0 AS behind_known, holds_slot, max_retained_wal
  FROM replicant.destination_status ORDER BY destination;
-- a destination halted alone (the worker records it so): status is
-- 'halted' and names it; the others are not
SELECT replicant.enable_pipeline('quiet');
UPDATE replicant.destinations SET halt_reason = 'the sink refused a request', halt_lsn = '0/10'
 WHERE name = 'search';
SELECT pipeline, state, last_error, next_retry_at FROM replicant.status;
SELECT destination, state = 'halted' AS halted, last_error, next_retry_at
  FROM replicant.destination_status ORDER BY destination;
SELECT destination, value = 4 AS halted FROM replicant.metrics
 WHERE metric = 'replicant_state' ORDER BY destination;
-- one row per pipeline, metric, label set and destination
SELECT count(*) = count(DISTINCT (pipeline, metric, status_class, le, table_name, destination)) AS distinct_rows,
       count(*) FILTER (WHERE metric = 'replicant_state') AS states,
       count(*) FILTER (WHERE metric = 'replicant_lag_bytes') AS lags
  FROM replicant.metrics;
SELECT replicant.resume_pipeline('quiet', 'search');
SELECT pipeline, state = 'halted' AS halted, last_error IS NOT DISTINCT FROM 'the sink refused a request' AS old_error
  FROM replicant.status;
SELECT replicant.disable_pipeline('quiet');
SELECT replicant.drop_destination('quiet', 'search');
SELECT replicant.drop_destination('quiet', 'cache');
-- per destination metrics name it; the pipeline's do not
SELECT metric, destination FROM replicant.metrics
 WHERE metric IN ('replicant_state', 'replicant_lag_bytes') ORDER BY metric, destination;
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
-- who may read status may read destination_status, the same URL, no secret
SELECT pipeline, destination, sink_url FROM replicant.destination_status;
SELECT sink_url FROM replicant.destinations;
-- the slot's cost, to whoever may read status
SELECT retained_wal_bytes >= 0 AS retains, wal_status, max_retained_wal, wal_warning FROM replicant.status;
RESET ROLE;
REVOKE SELECT ON replicant.status FROM watcher;
SET ROLE watcher;
SELECT count(*) FROM replicant.destination_status;
RESET ROLE;
REVOKE USAGE ON SCHEMA replicant FROM watcher;
SELECT replicant.drop_pipeline('quiet');
SELECT count(*) FROM replicant.status;
DROP PUBLICATION pub;
DROP TABLE t;
DROP EXTENSION replicant;
DROP ROLE watcher;
