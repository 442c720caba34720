#!/usr/bin/env bash
# bench/backfill_modes.sh -- how fast each backfill read method is, on a
# table whose key follows the heap order and on one with random UUID keys,
# beside COPY (SELECT row_to_json(t) FROM t) over the same tables.  The
# evidence behind mode => 'auto' (README, backfill).
#
#   sudo bash bench/backfill_modes.sh [ROWS]     (default 500000 per table)
#
# Uses bench/lib.sh and the C sink; needs the installed extension.
set -euo pipefail
ROWS=${1:-500000}
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=$(mktemp -d /tmp/replicant-modes.XXXXXX)
PGPORT=55480
SINK_PORT=55481
RESULTS="$WORK/results.tsv"
PERF=0
# shellcheck source=lib.sh
. "$BENCH_DIR/lib.sh"
trap 'rc=$?; [ $rc = 0 ] || tail -20 "$WORK/server.log" >&2; sink_stop; cluster_stop; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/bin"
gcc -O2 -Wall -o "$WORK/bin/sink" "$BENCH_DIR/sink.c"
cluster_start
sink_start

psql_b <<SQL
CREATE TABLE ordered (id bigint PRIMARY KEY, n int, note text, at timestamptz, amount numeric, doc jsonb);
INSERT INTO ordered SELECT g, g % 1000, md5(g::text), now() - g * interval '1 s', g / 7.0,
       jsonb_build_object('g', g) FROM generate_series(1, $ROWS) g;
CREATE TABLE randomkey (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), n int, note text,
       at timestamptz, amount numeric, doc jsonb);
INSERT INTO randomkey (n, note, at, amount, doc) SELECT g % 1000, md5(g::text),
       now() - g * interval '1 s', g / 7.0, jsonb_build_object('g', g) FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE ordered, randomkey;
CREATE PUBLICATION modes FOR TABLE ordered, randomkey;
SELECT replicant.create_pipeline('modes', 'modes', 'http://127.0.0.1:$SINK_PORT/');
SQL
pipeline_wait_state modes streaming

printf '\n%-10s %-8s %10s %12s\n' table mode seconds rows/s
for table in ordered randomkey; do
	start=$(now)
	as_pg "$BINDIR/psql" -X -q -h "$SOCKDIR" -p "$PGPORT" -d bench \
		-c "COPY (SELECT row_to_json(t) FROM $table t) TO '/dev/null'"
	secs=$(since "$start")
	printf '%-10s %-8s %10s %12s\n' "$table" "COPY-json" "$secs" "$(calc "$ROWS / $secs")"
	for mode in keyset bitmap ctid auto; do
		start=$(now)
		id=$(q "SELECT replicant.backfill('modes', '$table', mode => '$mode')")
		until [ "$(q "SELECT state FROM replicant.backfill_status WHERE id = $id")" = done ]; do
			sleep 0.05
		done
		secs=$(since "$start")
		chosen=$(q "SELECT mode FROM replicant.backfill_status WHERE id = $id")
		label=$mode
		[ "$mode" = auto ] && label="auto:$chosen"
		printf '%-10s %-8s %10s %12s\n' "$table" "$label" "$secs" "$(calc "$ROWS / $secs")"
	done
done
