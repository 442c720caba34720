CREATE EXTENSION replicant;
\set VERBOSITY terse

-- The encoder's output for one column of each kind of type, through
-- replicant._encode_row(), which encodes exactly as the snapshot path does.

CREATE TYPE enc_mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE enc_inner AS (a int, b text);
CREATE TYPE enc_outer AS (id int, inner_val enc_inner, tags text[]);
CREATE DOMAIN enc_posint AS int CHECK (VALUE > 0);
CREATE DOMAIN enc_pair AS enc_inner CHECK ((VALUE).a > 0);
CREATE DOMAIN enc_intarr AS int[];
CREATE TYPE enc_moodrange AS RANGE (subtype = enc_mood);

CREATE TABLE enc_zoo (
    id              int PRIMARY KEY,
    c_int2          int2,
    c_int4          int4,
    c_int8          int8,
    c_oid           oid,
    c_numeric       numeric,
    c_float4        float4,
    c_float8        float8,
    c_bool          bool,
    c_text          text,
    c_varchar       varchar(20),
    c_char          char(5),
    c_json          json,
    c_jsonb         jsonb,
    c_int_2d        int[],
    c_text_arr      text[],
    c_jsonb_arr     jsonb[],
    c_outer         enc_outer,
    c_outer_arr     enc_outer[],
    c_mood          enc_mood,
    c_mood_arr      enc_mood[],
    c_posint        enc_posint,
    c_pair          enc_pair,
    c_intarr        enc_intarr,
    c_int4range     int4range,
    c_tstzrange     tstzrange,
    c_multirange    int4multirange,
    c_moodrange     enc_moodrange,
    c_bytea         bytea,
    c_uuid          uuid,
    c_date          date,
    c_time          time,
    c_timetz        timetz,
    c_timestamp     timestamp,
    c_timestamptz   timestamptz,
    c_interval      interval,
    c_inet          inet,
    c_cidr          cidr,
    c_macaddr       macaddr,
    c_money         money,
    c_bit           bit(4),
    c_varbit        varbit,
    c_tsvector      tsvector,
    c_tsquery       tsquery,
    c_point         point,
    c_line          line,
    c_lseg          lseg,
    c_box           box,
    c_path          path,
    c_polygon       polygon,
    c_circle        circle,
    c_xml           xml,
    c_pg_lsn        pg_lsn,
    c_snapshot      pg_snapshot,
    c_generated     int GENERATED ALWAYS AS (c_int2 * 2) STORED
);

INSERT INTO enc_zoo VALUES (
    1, -32768, -2147483648, -9223372036854775808, 4294967295,
    -123.4500, 0.1, 0.30000000000000004, true,
    E'q"uote \\ nl\n tab\t cr\r bs\b ff\f ctl\x01\x1f',
    'hello "w"', 'ab',
    '{"b": 1, "a": [1, 2.50, "x"]}',
    '{"b": 1, "a": [1, 2.50, null]}',
    '{{1,NULL,3},{4,5,NULL}}',
    ARRAY['a', NULL, 'b"c', 'NULL'],
    ARRAY['{"x": 1}'::jsonb, NULL, '[true, "y"]'],
    ROW(1, ROW(2, 'two'), ARRAY['x', 'y']),
    ARRAY[ROW(1, ROW(2, 'two'), '{}')::enc_outer, NULL, ROW(3, NULL, NULL)::enc_outer],
    'happy', '{sad,ok}',
    42, ROW(7, 'seven'), '{1,2}',
    '[1,10)', '[2024-01-01 00:00+00,2024-01-02 00:00+00)', '{[1,3),[5,7)}', '[sad,happy]',
    '\xdeadbeef00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '2024-02-29', '13:14:15.5', '13:14:15+05:30',
    '2024-02-29 13:14:15.5', '2024-02-29 13:14:15.123456+05:30',
    '1 year 2 mons 3 days 04:05:06.5',
    '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 1234.56,
    B'1010', B'110',
    'a fat cat', 'fat & (rat | !cat)',
    '(0.1,0.30000000000000004)', '{1,-1,0}', '[(0,0),(1,1)]', '(1,1),(0,0)',
    '[(0,0),(1,1)]', '((0,0),(1,1),(1,0))', '<(0,0),1>',
    '<a b="1">x &amp; y</a>', '16/B374D848', '10:20:10,14,15');
-- a NULL in every column
INSERT INTO enc_zoo (id) VALUES (2);

-- every output is valid JSON
SELECT id, replicant._encode_row(r)::jsonb IS NOT NULL AS valid
  FROM enc_zoo r ORDER BY id;

-- one line per column, in attnum order; json_each keeps each value's text
SELECT r1.key, r1.value AS row1, r2.value AS row2
  FROM json_each((SELECT replicant._encode_row(r)::json FROM enc_zoo r WHERE id = 1))
       WITH ORDINALITY r1
  JOIN json_each((SELECT replicant._encode_row(r)::json FROM enc_zoo r WHERE id = 2))
       WITH ORDINALITY r2 USING (ordinality)
 ORDER BY ordinality;

-- numbers: shortest exact floats; NaN and infinities become strings
CREATE TABLE enc_numbers (id int, f4 float4, f8 float8, num numeric);
INSERT INTO enc_numbers VALUES
    (1, 0.1, 0.1, 0.1),
    (2, 1.2345679, 0.30000000000000004, 123456789012345678901234567890.123456789),
    (3, 3.4028235e38, 1e-300, 1e40),
    (4, '-0', '-0', '-0.0'),
    (5, 'NaN', 'NaN', 'NaN'),
    (6, 'Infinity', 'Infinity', 'Infinity'),
    (7, '-Infinity', '-Infinity', '-Infinity');
SELECT replicant._encode_row(r) FROM enc_numbers r ORDER BY id;

-- arrays: dimensions nest, lower bounds are dropped, empty is []
CREATE TABLE enc_arrays (id int, a int[]);
INSERT INTO enc_arrays VALUES
    (1, '{}'), (2, '{NULL}'), (3, '[0:2]={1,2,3}'), (4, '{{{1},{2}},{{3},{NULL}}}');
SELECT replicant._encode_row(r) FROM enc_arrays r ORDER BY id;

-- strings are escaped exactly as to_json() escapes them
CREATE TABLE enc_strings (id int, t text);
INSERT INTO enc_strings VALUES
    (1, ''), (2, 'plain'), (3, E'"\\/\b\f\n\r\t'),
    (4, (SELECT string_agg(chr(i), '') FROM generate_series(1, 127) i)),
    (5, 'é 日本 😀'),
    (6, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 5000) i));
SELECT id, replicant._encode_row(r) = '{"id":' || id || ',"t":' || to_json(t)::text || '}' AS same_as_to_json
  FROM enc_strings r ORDER BY id;
-- (unaligned, so that the output does not depend on how psql measures UTF-8)
\pset format unaligned
SELECT replicant._encode_row(r) FROM enc_strings r WHERE id IN (1, 3, 5) ORDER BY id;

-- anonymous records are objects too
SELECT replicant._encode_row(ROW(1, 'a', ROW(2, NULL, ARRAY[ROW(3)])));

-- column names are kept exactly; dropped columns are skipped
CREATE TABLE enc_names (id int, "CamelCase" int, dropme text, "with space" text,
                        "quo""te\" int, "ünï" bool);
ALTER TABLE enc_names DROP COLUMN dropme;
INSERT INTO enc_names VALUES (1, 2, 'x', 3, true);
SELECT replicant._encode_row(r) FROM enc_names r;
\pset format aligned

-- dates and times are written as to_json() writes them (ISO 8601, XSD style)
CREATE DOMAIN enc_day AS date;
CREATE TABLE enc_datetimes (id int, d date, t time, tz timetz, ts timestamp,
                            tstz timestamptz, dom enc_day, arr timestamptz[]);
INSERT INTO enc_datetimes VALUES
    (1, '2026-12-01', '09:13:48.630015', '09:13:48.630015+00', '2026-12-01 09:13:48.630015',
     '2026-12-01 09:13:48.630015+00', '2026-12-01', '{2026-12-01 09:13:48+00,NULL}'),
    (2, 'infinity', '24:00:00', '00:00:00-15:59', 'infinity', 'infinity', 'infinity', '{infinity}'),
    (3, '-infinity', '00:00:00', '23:59:59.999999+15:59', '-infinity', '-infinity', '-infinity', '{-infinity}'),
    (4, '0044-03-15 BC', '12:00', '12:00:00+05:30:15', '0044-03-15 12:00:00.5 BC',
     '0001-01-01 00:00:00+00 BC', '4713-11-24 BC', '{}'),
    (5, '294276-12-31', '23:59:59.999999', '12:00-05', '294276-12-31 23:59:59.999999',
     '294276-12-31 23:59:59.999999+00', '5874897-12-31', '{0001-01-01 00:00:00+00}');
SET TimeZone = 'UTC';
SELECT id, replicant._encode_row(r) = to_json(r)::text AS same_as_to_json
  FROM enc_datetimes r ORDER BY id;
RESET TimeZone;
\pset format unaligned
SELECT replicant._encode_row(r) FROM enc_datetimes r ORDER BY id;
\pset format aligned

-- the types written without their output functions give exactly what
-- to_json() gives through those functions, edge values included
CREATE DOMAIN enc_fast_int AS int4;
CREATE DOMAIN enc_fast_text AS text;
CREATE TABLE enc_fast (id int, i2 int2, i4 int4, i8 int8, o oid, b bool,
                       t text, vc varchar(12), bp char(6), nm name, num numeric,
                       j jsonb, di enc_fast_int, dt enc_fast_text, ai int8[],
                       at text[], abp char(3)[], aj jsonb[]);
INSERT INTO enc_fast VALUES
    (1, -32768, -2147483648, -9223372036854775808, 0, false,
     '', '', '', '', 0, '{}', -2147483648, '', '{}', '{}', '{}', '{}'),
    (2, 32767, 2147483647, 9223372036854775807, 4294967295, true,
     E'q"uote \\ nl\n tab\t cr\r bs\b ff\f ctl\x01\x1f\x7f',
     E'"\\', 'ab', E'n"a\\me', '-0.00', '[]', 2147483647, E'\\"',
     '{-9223372036854775808,NULL,9223372036854775807}',
     ARRAY['', NULL, E'"\n', 'é'], '{a,NULL,"b c"}',
     ARRAY['null'::jsonb, NULL, '"\u0001"', '[[[]]]']),
    (3, 0, 0, 0, 1, NULL,
     'é 日本 😀', 'é日本😀', 'é', 'é 日本', 'NaN', 'null', 0, 'é 日本 😀',
     '{{1,2},{3,NULL}}', '{{a},{b}}', '{{x},{NULL}}', '{}'),
    (4, -1, -1, -1, 2147483648, true,
     (SELECT string_agg(chr(i), '') FROM generate_series(1, 127) i),
     'trailing  ', 'pad   ', repeat('n', 63), 'Infinity', 'true', -1,
     (SELECT string_agg(chr(i), '') FROM generate_series(1, 127) i),
     '[5:6]={1,2}', '{}', '{}', '{}'),
    (5, 9, 10, 100000, 10, false,
     repeat(E'x"\\y', 3000), 'x', 'x', 'x', '-Infinity', '"a\"b\\c\u0001\n\u001f"',
     NULL, NULL, NULL, NULL, NULL, NULL),
    (6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     '123456789012345678901234567890.000000000000000000001',
     '{"": "", "a": {"b": [1, [2, {}], [], null]}, "é": ["日本", false]}',
     NULL, NULL, NULL, NULL, NULL, NULL),
    (7, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1e-20,
     '[1e100, -0.0, 0.10, -12345678901234567890.5, "x", {"y": [true, false]}]',
     NULL, NULL, NULL, NULL, NULL, NULL),
    (8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     (SELECT jsonb_object_agg('k' || i, CASE WHEN i % 3 = 0 THEN to_jsonb(i)
                                             WHEN i % 3 = 1 THEN to_jsonb(md5(i::text))
                                             ELSE jsonb_build_array(i, NULL) END)
        FROM generate_series(1, 100) i),
     NULL, NULL, NULL, NULL, NULL,
     ARRAY[(SELECT jsonb_agg(i) FROM generate_series(1, 100) i)]),
    (9, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '"scalar"',
     NULL, NULL, NULL, NULL, NULL, NULL),
    (10, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '-1.5',
     NULL, NULL, NULL, NULL, NULL, NULL),
    (11, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL, NULL);
-- (to_json() writes an oid as a string, the encoder as a number: oid apart)
CREATE VIEW enc_fast_no_oid AS
SELECT id, i2, i4, i8, b, t, vc, bp, nm, num, j, di, dt, ai, at, abp, aj
  FROM enc_fast;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE replicant._encode_row(r) IS DISTINCT FROM to_json(r)::text) AS differ
  FROM enc_fast_no_oid r;
-- (any row that differs, to see which)
SELECT id FROM enc_fast_no_oid r
 WHERE replicant._encode_row(r) IS DISTINCT FROM to_json(r)::text ORDER BY id;
-- oid and jsonb alone, against their output functions
SELECT count(*) AS values,
       count(*) FILTER (WHERE replicant._encode_row(ROW(o)) IS DISTINCT FROM
                              '{"f1":' || coalesce(o::text, 'null') || '}') AS oid_differ,
       count(*) FILTER (WHERE replicant._encode_row(ROW(j)) IS DISTINCT FROM
                              '{"f1":' || coalesce(j::text, 'null') || '}') AS jsonb_differ
  FROM enc_fast;
-- jsonb documents of every shape, read in place: objects and arrays of 0
-- to 69 items (offsets stored every 32nd entry), nested, strings that need
-- escaping, numerics, values short enough for a 1-byte header, long ones,
-- compressed ones, against jsonb's output function
CREATE TABLE enc_jsonb_docs AS
SELECT i, CASE i % 4
    WHEN 0 THEN (SELECT coalesce(jsonb_object_agg('k' || k || repeat('é', k % 3),
                   CASE k % 6 WHEN 0 THEN to_jsonb(k * 1.5) WHEN 1 THEN to_jsonb(repeat(E's"\\', k % 40))
                                WHEN 2 THEN 'null'::jsonb WHEN 3 THEN to_jsonb(k % 2 = 0)
                                WHEN 4 THEN jsonb_build_array(k, jsonb_build_object('x', k, 'y', '[]'::jsonb))
                                ELSE '{}'::jsonb END), '{}')
                   FROM generate_series(1, i % 70) k)
    WHEN 1 THEN (SELECT coalesce(jsonb_agg(CASE k % 4 WHEN 0 THEN to_jsonb(-k) WHEN 1 THEN to_jsonb(repeat('y', k))
                                                       WHEN 2 THEN '[]'::jsonb
                                                       ELSE jsonb_build_object('n', k, 'm', NULL::int) END), '[]')
                   FROM generate_series(1, i % 70) k)
    WHEN 2 THEN to_jsonb(repeat('z', i * 7))
    ELSE to_jsonb(i * -0.25) END AS j
  FROM generate_series(0, 399) i;
SELECT count(*) AS docs,
       count(*) FILTER (WHERE pg_column_size(j) < 127) AS short,
       count(*) FILTER (WHERE pg_column_compression(j) IS NOT NULL) AS compressed,
       count(*) FILTER (WHERE replicant._encode_row(d) IS DISTINCT FROM
                              '{"i":' || i || ',"j":' || j::text || '}') AS differ
  FROM enc_jsonb_docs d;
-- numerics in both stored formats (short: small weight and scale; long:
-- the others), against their output function as to_json() writes it
CREATE DOMAIN enc_fast_numeric AS numeric;
CREATE TABLE enc_fast_numerics (v numeric, money12 numeric(12,2), d enc_fast_numeric);
INSERT INTO enc_fast_numerics (v)
SELECT v FROM unnest(ARRAY[0, 0.0, -0.0, 0.0001, -0.00001, 1, -1, 9999, 10000, 10001,
                           99999999, 100000000, 0.1, 0.12345, 12345.6789,
                           1e-20, -1e-64, 1e-100, 1e63, 1e64, 1e252, -1e300,
                           10::numeric ^ 1000, -(10::numeric ^ 1000 - 1),
                           round(1 / 3::numeric, 100), -round(2 / 3::numeric, 1000),
                           'NaN', 'Infinity', '-Infinity']) v
UNION ALL
SELECT round((-1)::numeric ^ g * g * 1234567.891011 * 10::numeric ^ (20 - g % 41), g % 30)
  FROM generate_series(1, 2000) g
UNION ALL
SELECT (g * 7919 % 100003) * 10::numeric ^ (g % 9 - 4) FROM generate_series(1, 2000) g;
UPDATE enc_fast_numerics SET money12 = round(v, 2), d = v
 WHERE v BETWEEN -9999999999.99 AND 9999999999.99 OR v = 'NaN';
SELECT count(*) AS values,
       count(*) FILTER (WHERE replicant._encode_row(ROW(v)) IS DISTINCT FROM
                              '{"f1":' || to_json(v)::text || '}') AS v_differ,
       count(*) FILTER (WHERE replicant._encode_row(r) IS DISTINCT FROM to_json(r)::text) AS row_differ,
       count(*) FILTER (WHERE replicant._encode_row(ROW(v))::json->>'f1' IS DISTINCT FROM v::text) AS text_differ
  FROM enc_fast_numerics r;
SELECT to_json(v)::text AS output, replicant._encode_row(ROW(v)) AS encoded
  FROM unnest('{0.0,-0.00001,10000,1e-20,1e70,NaN,-Infinity}'::numeric[]) v;
-- timestamptz over its whole range, against to_json() in UTC
CREATE DOMAIN enc_fast_tstz AS timestamptz;
CREATE TABLE enc_fast_tstzs (v timestamptz, d enc_fast_tstz, a timestamptz[],
                             n serial);
INSERT INTO enc_fast_tstzs (v)
SELECT v FROM unnest('{infinity,-infinity,"4714-11-24 00:00:00+00 BC",
                       "294276-12-31 23:59:59.999999+00","0001-01-01 00:00:00+00 BC",
                       "0001-12-31 23:59:59.9+00 BC","0001-01-01 00:00:00+00",
                       "2000-01-01 00:00:00.5+00","2000-01-01 00:00:00.000001+00",
                       "2000-02-29 12:34:56.100000+00","9999-12-31 23:59:59.99999+00",
                       "10000-01-01 00:00:00+00"}'::timestamptz[]) v
UNION ALL
SELECT make_timestamptz(CASE WHEN y = 0 THEN 1 ELSE y END, 1 + g % 12, 1 + g % 28,
                        g % 24, g * 7 % 60, g % 60 + (g * 7919 % 1000000) / 1e6, 'UTC')
  FROM generate_series(1, 3000) g, LATERAL (SELECT g * 97 % 298000 - 4713 AS y) y;
UPDATE enc_fast_tstzs SET d = v, a = ARRAY[v, NULL];
SET TimeZone = 'UTC';
SELECT count(*) AS values,
       count(*) FILTER (WHERE replicant._encode_row(ROW(v)) IS DISTINCT FROM
                              '{"f1":' || to_json(v)::text || '}') AS v_differ,
       count(*) FILTER (WHERE replicant._encode_row(r) IS DISTINCT FROM to_json(r)::text) AS row_differ
  FROM enc_fast_tstzs r;
RESET TimeZone;
SELECT replicant._encode_row(ROW(v)) AS encoded FROM enc_fast_tstzs ORDER BY n LIMIT 12;
\pset format unaligned
SELECT replicant._encode_row(r) FROM enc_fast r WHERE id IN (1, 2, 6, 7, 9) ORDER BY id;
\pset format aligned

-- the output does not depend on the session's settings
CREATE TEMP TABLE enc_before AS
SELECT 'zoo' AS t, id, replicant._encode_row(r) AS j FROM enc_zoo r
UNION ALL
SELECT 'numbers', id, replicant._encode_row(r) FROM enc_numbers r
UNION ALL
SELECT 'datetimes', id, replicant._encode_row(r) FROM enc_datetimes r;

SET DateStyle = 'SQL, DMY';
SET TimeZone = 'Asia/Tokyo';
SET extra_float_digits = 0;
SET bytea_output = 'escape';
SET IntervalStyle = 'postgres_verbose';

SELECT b.t, b.id, a.j = b.j AS same
  FROM enc_before b
  JOIN (SELECT 'zoo' AS t, id, replicant._encode_row(r) AS j FROM enc_zoo r
        UNION ALL
        SELECT 'numbers', id, replicant._encode_row(r) FROM enc_numbers r
        UNION ALL
        SELECT 'datetimes', id, replicant._encode_row(r) FROM enc_datetimes r) a
       USING (t, id)
 ORDER BY b.t, b.id;

-- the columns these settings would have changed, once more
SELECT key, value
  FROM json_each((SELECT replicant._encode_row(r)::json FROM enc_zoo r WHERE id = 1))
 WHERE key IN ('c_float8', 'c_tstzrange', 'c_bytea', 'c_date', 'c_timestamp',
               'c_timestamptz', 'c_interval', 'c_point');

-- and the session's own settings are back once the function returns
SELECT current_setting('DateStyle') AS datestyle,
       current_setting('TimeZone') AS timezone,
       current_setting('extra_float_digits') AS extra_float_digits,
       current_setting('bytea_output') AS bytea_output,
       current_setting('IntervalStyle') AS intervalstyle,
       current_setting('search_path') AS search_path;

RESET DateStyle;
RESET TimeZone;
RESET extra_float_digits;
RESET bytea_output;
RESET IntervalStyle;

DROP VIEW enc_fast_no_oid;
DROP TABLE enc_zoo, enc_numbers, enc_arrays, enc_strings, enc_names, enc_datetimes, enc_fast,
    enc_fast_numerics, enc_fast_tstzs;
DROP DOMAIN enc_fast_int, enc_fast_text, enc_fast_numeric, enc_fast_tstz;
DROP DOMAIN enc_day;
DROP TYPE enc_moodrange, enc_outer, enc_mood;
DROP DOMAIN enc_posint, enc_pair, enc_intarr;
DROP TYPE enc_inner;
DROP EXTENSION replicant;
