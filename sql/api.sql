-- The management API: every function, its validation errors, and that a
-- failed call leaves nothing behind.
\set VERBOSITY terse
CREATE EXTENSION replicant;
CREATE TABLE t1 (id int PRIMARY KEY, v text);
CREATE PUBLICATION p1 FOR TABLE t1;
CREATE PUBLICATION p2 FOR ALL TABLES;
CREATE FUNCTION leftovers(OUT pipelines bigint, OUT slots bigint) LANGUAGE sql AS $$
  SELECT (SELECT count(*) FROM replicant.pipelines),
         (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'replicant%')
$$;

-- pipeline names
SELECT replicant.create_pipeline(NULL, 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('Orders', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('a''b', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('a"b', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('a;drop table t1', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline(repeat('a', 49), 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('ordérs', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('a b', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline(E'a\\b', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('$$x$$', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('a--b', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('a/*b*/', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline(E'a\nb', 'p1', 'http://127.0.0.1:9/');

-- publications
SELECT replicant.create_pipeline('x', NULL::text, 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', NULL::text[], 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', ARRAY[]::text[], 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', ARRAY[NULL]::text[], 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', 'nope', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', ARRAY['p1', 'nope'], 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', ARRAY['p1', 'p1'], 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', '', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', 'p1;drop table t1', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', '"p1"', 'http://127.0.0.1:9/');
SELECT replicant.create_pipeline('x', repeat('p', 64), 'http://127.0.0.1:9/');

-- sink URLs
SELECT replicant.create_pipeline('x', 'p1', NULL);
SELECT replicant.create_pipeline('x', 'p1', '');
SELECT replicant.create_pipeline('x', 'p1', 'file:///etc/passwd');
SELECT replicant.create_pipeline('x', 'p1', 'ftp://127.0.0.1/');
SELECT replicant.create_pipeline('x', 'p1', 'gopher://127.0.0.1/');
SELECT replicant.create_pipeline('x', 'p1', 'javascript:alert(1)');
SELECT replicant.create_pipeline('x', 'p1', 'garbage');
SELECT replicant.create_pipeline('x', 'p1', 'http://');
SELECT replicant.create_pipeline('x', 'p1', 'http://user:hunter2@127.0.0.1/');
SELECT replicant.create_pipeline('x', 'p1', 'https://token@127.0.0.1/');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1/a b');
SELECT replicant.create_pipeline('x', 'p1', E'http://127.0.0.1/\r\nX-Injected: 1');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:99999/');
SELECT replicant.create_pipeline('x', 'p1', 'http://' || repeat('a', 2100) || '/');

-- snapshot modes and numeric options
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', snapshot => NULL);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', snapshot => 'bogus');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', snapshot => 'initial', snapshot_workers => 0);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', snapshot => 'initial', snapshot_workers => 17);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', batch_max_bytes => -1);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', batch_max_bytes => NULL);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', batch_max_transactions => 0);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', http_timeout_ms => -5);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', connect_timeout_ms => 2000000000);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', no_such_option => 1);

-- headers
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => NULL);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '[]');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '"Authorization"');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"X-Count": 1}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"": "v"}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"Bad Name": "v"}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"X-A\r\nX-B": "v"}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"X-A": "v\r\nX-Injected: 1"}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"Content-Type": "text/plain"}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', headers => '{"webhook-signature": "v1,forged"}');

-- messages
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', messages => NULL);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', messages => true, message_prefixes => '{}');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', messages => true, message_prefixes => ARRAY[NULL]);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', messages => true, message_prefixes => ARRAY['']);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', messages => true, message_prefixes => ARRAY['replicant.watermark']);

-- signing secrets
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', secret => '');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', secret => 'whsec_!!!not base64');

-- wire formats
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', format => NULL);
\set VERBOSITY default
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', format => 'bogus');
\set VERBOSITY terse
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', format => 'Replicant');

-- create_tables: only format 'clickhouse' has target tables; enabled
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', create_tables => true);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', format => 'cloudevents', create_tables => true);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', create_tables => NULL);
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', enabled => NULL);

-- max_retained_wal: a size as max_slot_wal_keep_size takes it (no unit: MB), 1MB or more
\set VERBOSITY default
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', max_retained_wal => '20XB');
\set VERBOSITY terse
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', max_retained_wal => 'lots');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', max_retained_wal => '100kB');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', max_retained_wal => '-1');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', max_retained_wal => '4PB');

-- on_slot_loss: 'halt' or 'resync', not null
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', on_slot_loss => 'heal');
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/', on_slot_loss => NULL);

-- sink_ddl before a pipeline exists: publications that exist, no nulls
SELECT replicant.sink_ddl(NULL::text[]);
SELECT replicant.sink_ddl(ARRAY[]::text[]);
SELECT replicant.sink_ddl(ARRAY[NULL]::text[]);
SELECT replicant.sink_ddl(ARRAY['nope']);
SELECT replicant.sink_ddl(ARRAY['p1;drop table t1']);
SELECT replicant.sink_ddl(ARRAY['p1']);
SELECT replicant.sink_ddl(publication => ARRAY['p1', 'p2']);
SELECT replicant.retry_pipeline('nope');
SELECT replicant.retry_pipeline(NULL);

-- a transaction block cannot create or drop pipelines
BEGIN;
SELECT replicant.create_pipeline('x', 'p1', 'http://127.0.0.1:9/');
ROLLBACK;

-- nothing above left anything behind
SELECT * FROM leftovers();

-- a pipeline, then everything that must refuse to touch it wrongly
SELECT replicant.create_pipeline('orders', ARRAY['p1', 'p2'], 'http://127.0.0.1:9/ingest',
    headers => '{"Authorization": "Bearer token-in-header"}', secret => 'whsec_c2VjcmV0');
SELECT replicant.create_pipeline('orders', 'p1', 'http://127.0.0.1:9/');
SELECT p.name, d.name AS destination, publications, sink_url, snapshot, enabled, p.halt_reason,
       batch_max_bytes, batch_max_transactions, http_timeout_ms, connect_timeout_ms
  FROM replicant.pipelines p JOIN replicant.destinations d ON d.pipeline_id = p.id;
SELECT * FROM leftovers();

SELECT replicant.alter_pipeline('nope', sink_url => 'http://127.0.0.1:9/');
SELECT replicant.alter_pipeline(NULL);
SELECT replicant.alter_pipeline('orders', sink_url => 'ftp://127.0.0.1/');
SELECT replicant.alter_pipeline('orders', batch_max_bytes => 0);
SELECT replicant.alter_pipeline('orders', publication => ARRAY['nope']);
SELECT replicant.alter_pipeline('orders', headers => '{"Host": "evil"}');
SELECT replicant.alter_pipeline('orders', secret => 'x', clear_secret => true);
SELECT replicant.alter_pipeline('orders', secret_previous_until => now() + interval '1 hour');
SELECT replicant.alter_pipeline('orders', secret => 'whsec_bmV3', secret_previous_until => now() - interval '1 hour');
SELECT replicant.alter_pipeline('orders', secret => 'whsec_bmV3', secret_previous_until => now() + interval '90 days');
SELECT replicant.alter_pipeline('orders', message_prefixes => ARRAY['replicant.x']);
SELECT replicant.alter_pipeline('orders', format => 'bogus');
SELECT format FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', format => 'replicant');
SELECT replicant.alter_pipeline('orders', create_tables => true);
SELECT replicant.alter_pipeline('orders', format => 'clickhouse', create_tables => true);
SELECT format, create_tables FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', format => 'replicant', create_tables => false);
SELECT max_retained_wal FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', max_retained_wal => '0');
SELECT replicant.alter_pipeline('orders', max_retained_wal => '20GB');
SELECT max_retained_wal FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', max_retained_wal => NULL);
SELECT max_retained_wal FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', max_retained_wal => '-1');
SELECT max_retained_wal FROM replicant.destinations;
SELECT on_slot_loss FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', on_slot_loss => 'Resync');
SELECT replicant.alter_pipeline('orders', on_slot_loss => 'resync');
SELECT on_slot_loss FROM replicant.destinations;
SELECT replicant.alter_pipeline('orders', on_slot_loss => 'halt');
SELECT replicant.await_delivered('nope');
SELECT replicant.await_delivered('orders', timeout_ms => NULL);
SELECT replicant.await_delivered('orders', timeout_ms => -1);
SELECT replicant.alter_pipeline('orders', batch_max_transactions => 50, publication => ARRAY['p1']);
SELECT publications, batch_max_transactions, config_version, secret IS NOT NULL AS signed
  FROM replicant.pipelines p JOIN replicant.destinations d ON d.pipeline_id = p.id;
SELECT replicant.alter_pipeline('orders', clear_secret => true);
SELECT secret IS NULL AS unsigned FROM replicant.destinations;

-- destinations: named at creation, changed one by one
SELECT replicant.alter_destination('orders', 'nope', batch_max_transactions => 10);
SELECT replicant.alter_destination('nope', 'default', batch_max_transactions => 10);
SELECT replicant.alter_destination('orders', NULL, batch_max_transactions => 10);
SELECT replicant.alter_destination('orders', 'Bad;Name', batch_max_transactions => 10);
SELECT replicant.alter_destination('orders', 'default', batch_max_bytes => 0);
SELECT replicant.alter_destination('orders', 'default', sink_url => 'ftp://127.0.0.1/');
SELECT replicant.alter_destination('orders', 'default', secret_previous_until => now() + interval '1 hour');
SELECT replicant.alter_destination('orders', 'default', create_tables => true);
SELECT replicant.alter_destination('orders', 'default', http_timeout_ms => 1000, secret => 'whsec_bmV3');
SELECT d.name, http_timeout_ms, secret IS NOT NULL AS signed, config_version
  FROM replicant.pipelines p JOIN replicant.destinations d ON d.pipeline_id = p.id;
SELECT replicant.alter_destination('orders', 'default', clear_secret => true);
SELECT secret IS NULL AS unsigned FROM replicant.destinations;
SELECT replicant.create_pipeline('named', 'p1', 'http://127.0.0.1:9/', destination => 'Search');
SELECT replicant.create_pipeline('named', 'p1', 'http://127.0.0.1:9/', destination => NULL);
SELECT replicant.create_pipeline('named', 'p1', 'http://127.0.0.1:9/', destination => 'search');
SELECT p.name, d.name AS destination FROM replicant.pipelines p
  JOIN replicant.destinations d ON d.pipeline_id = p.id ORDER BY p.name;
SELECT d LIKE '%, format => ''replicant'', destination => ''search'');' AS names_its_destination
  FROM replicant.pipeline_definitions() d WHERE d LIKE '%''named''%';
SELECT replicant.alter_destination('named', 'default', http_timeout_ms => 1000);
SELECT replicant.alter_pipeline('named', http_timeout_ms => 2000);
SELECT replicant.alter_destination('named', 'search', batch_max_transactions => 7);
SELECT http_timeout_ms, batch_max_transactions FROM replicant.destinations d
  JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'named';
SELECT replicant.drop_pipeline('named');
SELECT count(*) FROM replicant.destinations;

-- several destinations (issue 34), on a disabled pipeline: no worker
-- delivers meanwhile
SELECT p.oid::regprocedure AS function, pg_get_function_arguments(p.oid) AS arguments,
       has_function_privilege('replicant_admin', p.oid, 'EXECUTE') AS admin,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public
  FROM pg_proc p
 WHERE p.pronamespace = 'replicant'::regnamespace
   AND p.proname IN ('add_destination', 'drop_destination', 'resume_pipeline')
 ORDER BY 1;
SELECT replicant.create_pipeline('fan', 'p1', 'http://127.0.0.1:9/a', enabled => false,
    secret => 'whsec_c2VjcmV0', headers => '{"X-Token": "t"}');
SELECT replicant.add_destination(NULL, 'b', 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('nope', 'b', 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('fan', NULL, 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('fan', '', 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('fan', 'Bad;Name', 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('fan', repeat('b', 49), 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('fan', 'default', 'http://127.0.0.1:9/b');
SELECT replicant.add_destination('fan', 'b', NULL);
SELECT replicant.add_destination('fan', 'b', 'ftp://127.0.0.1/');
SELECT replicant.add_destination('fan', 'b', 'http://user:pw@127.0.0.1/');
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', format => 'bogus');
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', format => NULL);
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', batch_max_bytes => 0);
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', headers => '{"Host": "x"}');
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', secret => '');
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', create_tables => true);
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', max_retained_wal => '-1');
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', on_slot_loss => 'heal');
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', snapshot => 'bogus');
\set VERBOSITY default
SELECT replicant.add_destination('fan', 'b', 'http://127.0.0.1:9/b', snapshot => 'initial');
\set VERBOSITY terse
SELECT count(*) AS destinations_after_refusals FROM replicant.destinations d
  JOIN replicant.pipelines p ON p.id = d.pipeline_id WHERE p.name = 'fan';

-- an added destination starts at the WAL position of the call (its commit
-- one below it: a commit record may start there); the oldest, which never
-- delivered, still has no checkpoint
SELECT pg_current_wal_insert_lsn() AS before_add \gset
-- each destination has its own format
SELECT replicant.add_destination('fan', 'search', 'http://127.0.0.1:9/b', format => 'cloudevents',
    batch_max_transactions => 7, secret => 'whsec_bmV3', headers => '{"X-B": "v"}',
    max_retained_wal => '2GB', on_slot_loss => 'resync');
SELECT replicant.add_destination('fan', 'cache', 'http://127.0.0.1:9/c');
SELECT d.name, d.format, d.batch_max_transactions, d.secret IS NOT NULL AS signed, d.headers,
       d.max_retained_wal, d.on_slot_loss, d.halt_reason, d.halt_lsn,
       c.end_lsn - c.commit_lsn = 1 AS one_below, c.end_lsn >= :'before_add' AS after_call,
       c.commit_lsn <= pg_current_wal_insert_lsn() AS before_now
  FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id
  LEFT JOIN replicant.checkpoints c ON c.destination_id = d.id
 WHERE p.name = 'fan' ORDER BY d.id;
SELECT replicant.add_destination('fan', 'search', 'http://127.0.0.1:9/d');
\set VERBOSITY default
-- NATS beside other destinations; two on one stream (or one explicit prefix) refused
SELECT replicant.add_destination('fan', 'relay', 'nats://127.0.0.1:4222/S');
SELECT replicant.add_destination('fan', 'relay2', 'nats://127.0.0.1:4223,127.0.0.1:4222/S');
SELECT replicant.alter_destination('fan', 'cache', sink_url => 'nats://127.0.0.1:4222/S');
SELECT replicant.add_destination('fan', 'relay2', 'nats://127.0.0.1:4223/T?subject_prefix=a.b');
SELECT replicant.add_destination('fan', 'relay3', 'nats://127.0.0.1:4224/U?subject_prefix=a.b');
SELECT replicant.drop_destination('fan', 'relay');
SELECT replicant.drop_destination('fan', 'relay2');
SELECT replicant.alter_destination('fan', 'cache', format => 'clickhouse');
-- alter_pipeline's sink options change the only destination: refused with several
SELECT replicant.alter_pipeline('fan', http_timeout_ms => 1000);
\set VERBOSITY terse
SELECT replicant.alter_pipeline('fan', clear_secret => true);
SELECT replicant.alter_pipeline('fan', sink_url => 'http://127.0.0.1:9/z');
SELECT config_version AS version_before FROM replicant.pipelines WHERE name = 'fan' \gset
SELECT replicant.alter_pipeline('fan', publication => ARRAY['p1', 'p2']);
SELECT config_version > :version_before AS restarted, publications FROM replicant.pipelines WHERE name = 'fan';
SELECT replicant.alter_destination('fan', 'cache', http_timeout_ms => 1000);
SELECT name, format, http_timeout_ms FROM replicant.destinations
 WHERE pipeline_id = (SELECT id FROM replicant.pipelines WHERE name = 'fan') ORDER BY id;

-- one destination resyncs alone: its checkpoint moves to the WAL position
-- of the call and every published table is planned for it
SELECT replicant.resync_pipeline('fan', 'nope');
SELECT replicant.resync_pipeline('fan', 'Bad;Name');
SELECT pg_current_wal_insert_lsn() AS before_resync \gset
SELECT replicant.resync_pipeline('fan', 'cache');
SELECT d.name, d.resync_reason, d.resync_losses, d.halt_reason, d.slot_released,
       c.commit_lsn = d.resync_lost_to AS checkpoint_moved, c.end_lsn >= :'before_resync' AS after_call,
       (SELECT count(*) FROM replicant.backfills b
         WHERE b.destination_id = d.id AND b.state = 'planned' AND NOT b.first_sent) AS tables_planned
  FROM replicant.destinations d JOIN replicant.checkpoints c ON c.destination_id = d.id
 WHERE d.name = 'cache';

-- a NATS destination takes others beside it
SELECT replicant.create_pipeline('natsonly', 'p1', 'nats://127.0.0.1:4222/S', enabled => false);
SELECT replicant.add_destination('natsonly', 'web', 'http://127.0.0.1:9/');
SELECT replicant.drop_pipeline('natsonly');

-- at most 16 destinations
SELECT count(replicant.add_destination('fan', 'd' || g, 'http://127.0.0.1:9/')) FROM generate_series(4, 16) g;
\set VERBOSITY default
SELECT replicant.add_destination('fan', 'd17', 'http://127.0.0.1:9/');
\set VERBOSITY terse
SELECT replicant.drop_destination('fan', 'nope');
SELECT replicant.drop_destination('nope', 'd4');
SELECT replicant.drop_destination('fan', NULL);
SELECT replicant.drop_destination('fan', 'Bad;Name');
SELECT count(replicant.drop_destination('fan', 'd' || g)) FROM generate_series(4, 16) g;
SELECT count(*) AS destinations, count(c.*) AS checkpoints FROM replicant.destinations d
  LEFT JOIN replicant.checkpoints c ON c.destination_id = d.id
 WHERE d.pipeline_id = (SELECT id FROM replicant.pipelines WHERE name = 'fan');

-- halts of one destination: resume_pipeline(name, destination) clears its
-- own, resume_pipeline(name) every one (the worker records them so)
UPDATE replicant.destinations SET halt_reason = 'the sink refused a request', halt_lsn = '0/10'
 WHERE name IN ('search', 'cache');
SELECT replicant.await_delivered('fan', timeout_ms => 0);
SELECT replicant.resume_pipeline('fan', 'nope');
SELECT replicant.resume_pipeline('fan', 'Bad;Name');
SELECT replicant.resume_pipeline('fan', 'default');
SELECT replicant.resume_pipeline('fan', 'search');
SELECT name, halt_reason, halt_lsn FROM replicant.destinations
 WHERE pipeline_id = (SELECT id FROM replicant.pipelines WHERE name = 'fan') ORDER BY id;
SELECT replicant.resume_pipeline('fan');
SELECT count(*) AS halted FROM replicant.destinations WHERE halt_reason IS NOT NULL OR halt_lsn IS NOT NULL;
SELECT replicant.resume_pipeline('fan', NULL);

-- pipeline_definitions: create_pipeline with the oldest, add_destination for
-- the others; dropping the oldest makes the next one create_pipeline's
SELECT replicant.drop_destination('fan', 'default');
SELECT d FROM replicant.pipeline_definitions() d WHERE d LIKE '%''fan''%';
CREATE TEMP VIEW fan_now AS
SELECT row_number() OVER (ORDER BY d.id) AS position, d.name, d.sink_url, d.format, d.headers,
       d.secret, d.ca_file, d.batch_max_bytes, d.batch_max_transactions, d.http_timeout_ms,
       d.connect_timeout_ms, d.create_tables, d.max_retained_wal, d.on_slot_loss, p.enabled,
       p.publications
  FROM replicant.destinations d JOIN replicant.pipelines p ON p.id = d.pipeline_id
 WHERE p.name = 'fan';
CREATE TEMP TABLE fan_before AS SELECT * FROM fan_now;
CREATE TEMP TABLE fan_definitions AS
SELECT d FROM replicant.pipeline_definitions(true) d WHERE d LIKE '%''fan''%';
SELECT replicant.drop_pipeline('fan');
SELECT d FROM fan_definitions \gexec
SELECT count(*) AS destinations, (SELECT count(*) FROM (TABLE fan_before EXCEPT TABLE fan_now
                                                        UNION ALL
                                                        (TABLE fan_now EXCEPT TABLE fan_before)) x) AS differences
  FROM fan_now;
-- the last destination stays: drop the pipeline instead
SELECT replicant.drop_destination('fan', 'cache');
\set VERBOSITY default
SELECT replicant.drop_destination('fan', 'search');
\set VERBOSITY terse
SELECT replicant.drop_pipeline('fan');
DROP VIEW fan_now;
DROP TABLE fan_before, fan_definitions;

-- backfills
CREATE TABLE t2 (id int PRIMARY KEY);
SELECT replicant.backfill('orders', 't1', mode => 'bogus');
SELECT replicant.backfill('orders', 't1', mode => NULL);
SELECT replicant.backfill('nope', 't1');
SELECT replicant.backfill('orders', NULL);
SELECT replicant.backfill('orders', 'pg_class');
SELECT replicant.backfill('orders', 't2');
SELECT replicant.backfill('orders', 'replicant.pipelines');
SELECT replicant.backfill('orders', 't1', destination => 'nope');
SELECT replicant.backfill('orders', 't1', destination => 'No');
SELECT replicant.backfill('orders', 't1', destination => 'default') > 0 AS planned;
SELECT relation, state, destination FROM replicant.backfill_status;
SELECT replicant.cancel_backfill((SELECT id FROM replicant.backfill_status));
SELECT replicant.backfill('orders', 't1', mode => 'keyset') > 0 AS planned;
SELECT replicant.backfill('orders', 't1');
SELECT relation, mode, state, rows_done FROM replicant.backfill_status WHERE state = 'planned';
SELECT replicant.cancel_backfill((SELECT id FROM replicant.backfill_status WHERE state = 'planned'));
SELECT replicant.cancel_backfill((SELECT max(id) FROM replicant.backfill_status));
SELECT replicant.cancel_backfill(-1);
SELECT replicant.cancel_backfill(NULL);
SELECT relation, mode, state FROM replicant.backfill_status;
DROP TABLE t2;

SELECT replicant.enable_pipeline('nope');
SELECT replicant.disable_pipeline('nope');
SELECT replicant.resume_pipeline('nope');
SELECT replicant.resync_pipeline('nope');
SELECT replicant.resync_pipeline(NULL);
SELECT replicant.drop_pipeline('nope');
SELECT replicant.enable_pipeline(NULL);
SELECT replicant.drop_pipeline('Bad;Name');

SELECT replicant.disable_pipeline('orders');
SELECT enabled FROM replicant.pipelines;
SELECT replicant.enable_pipeline('orders');
SELECT replicant.resume_pipeline('orders');

-- created disabled: the slot is made (it keeps what commits), no worker runs
SELECT replicant.create_pipeline('later', 'p1', 'http://127.0.0.1:9/', enabled => false);
SELECT name, enabled FROM replicant.pipelines WHERE name = 'later';
SELECT state, worker_pid FROM replicant.status WHERE pipeline = 'later';
SELECT count(*) FROM pg_replication_slots s JOIN replicant.status st ON st.slot_name = s.slot_name WHERE st.pipeline = 'later';
SELECT replicant.retry_pipeline('later');
SELECT replicant.drop_pipeline('later');

BEGIN;
SELECT replicant.drop_pipeline('orders');
ROLLBACK;

-- ordinary roles see nothing and can do nothing
CREATE ROLE replicant_nobody LOGIN;
SET ROLE replicant_nobody;
SELECT * FROM replicant.pipelines;
SELECT * FROM replicant.destinations;
SELECT * FROM replicant.status;
SELECT replicant.create_pipeline('y', 'p1', 'http://127.0.0.1:9/');
SELECT replicant.drop_pipeline('orders');
SELECT replicant.retry_pipeline('orders');
SELECT replicant.alter_destination('orders', 'default', batch_max_transactions => 10);
SELECT replicant.add_destination('orders', 'b', 'http://127.0.0.1:9/');
SELECT replicant.drop_destination('orders', 'default');
SELECT replicant.resume_pipeline('orders', 'default');
SELECT * FROM replicant.backfill_status;
RESET ROLE;
GRANT USAGE ON SCHEMA replicant TO replicant_nobody;
SET ROLE replicant_nobody;
SELECT * FROM replicant.backfill_status;
SELECT replicant.sink_ddl(ARRAY['p1']);
SELECT * FROM replicant.metrics;
SELECT * FROM replicant._metrics();
RESET ROLE;
-- metrics: pg_monitor's members may read them
GRANT pg_monitor TO replicant_nobody;
SET ROLE replicant_nobody;
SELECT metric, destination, value >= 0 AS present FROM replicant.metrics
 WHERE pipeline = 'orders' AND metric IN ('replicant_state', 'replicant_retained_wal_bytes')
 ORDER BY metric, destination;
RESET ROLE;
REVOKE pg_monitor FROM replicant_nobody;
REVOKE USAGE ON SCHEMA replicant FROM replicant_nobody;
SELECT has_function_privilege('replicant_nobody', 'replicant.drop_pipeline(text)', 'EXECUTE') AS can_drop,
       has_table_privilege('replicant_nobody', 'replicant.pipelines', 'SELECT') AS can_read_secrets,
       has_table_privilege('replicant_nobody', 'replicant.destinations', 'SELECT') AS can_read_sinks;

SELECT replicant.drop_pipeline('orders');
SELECT * FROM leftovers();
DROP ROLE replicant_nobody;
DROP FUNCTION leftovers();
DROP PUBLICATION p1, p2;
DROP TABLE t1;
DROP EXTENSION replicant;
