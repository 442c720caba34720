# bench/scenarios_clickhouse.sh -- scenario 7: replicant into a real
# ClickHouse server (format => 'clickhouse'), sourced by bench/run.
#
# The server is Debian's clickhouse-server, started as the tests start it
# (test/ClickHouse.pm): test/clickhouse/config.xml and users.xml, loopback
# only, a private data directory in WORK, run as the postgres OS user, and
# stopped at the end.

CH_DIR="$WORK/clickhouse"
CH_URL="http://127.0.0.1:$CH_PORT/"

ch_start() {
	local bin=/usr/sbin/clickhouse-server
	[ -x "$bin" ] || bin=$(command -v clickhouse-server) || die "clickhouse-server is not installed"
	ch_stop
	rm -rf "$CH_DIR"
	mkdir -p "$CH_DIR"
	sed -e "s|@DIR@|$CH_DIR|g" -e "s|@LOG@|$CH_DIR/server.log|g" \
		-e "s|@ERRORLOG@|$CH_DIR/server.err.log|g" -e "s|@HTTP_PORT@|$CH_PORT|g" \
		-e "s|@TCP_PORT@|$((CH_PORT + 1))|g" "$BENCH_DIR/../test/clickhouse/config.xml" >"$CH_DIR/config.xml"
	cp "$BENCH_DIR/../test/clickhouse/users.xml" "$CH_DIR/users.xml"
	chown -R postgres: "$CH_DIR"
	# The server's own pid through exec, so that it is stopped by its id.
	as_pg bash -c "echo \$\$ >'$CH_DIR/pid'; cd '$CH_DIR'; exec '$bin' --config-file='$CH_DIR/config.xml'" \
		</dev/null >>"$CH_DIR/stdout.log" 2>&1 &
	for _ in $(seq 600); do
		curl -sf "${CH_URL}?query=SELECT%201" >/dev/null 2>&1 && { CH_PID=$(cat "$CH_DIR/pid"); return 0; }
		sleep 0.1
	done
	tail -5 "$CH_DIR/stdout.log" "$CH_DIR/server.err.log" >&2 2>/dev/null || true
	die "clickhouse-server did not start"
}

ch_stop() {
	[ -n "${CH_PID:-}" ] || return 0
	kill "$CH_PID" 2>/dev/null || true
	for _ in $(seq 300); do
		kill -0 "$CH_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$CH_PID" 2>/dev/null || true
	CH_PID=
}

# ch_q SQL [DATABASE]: one query over HTTP, the SQL as the body; dies with
# the server's message on an error (bench data only, never replicant's).
ch_q() {
	local out
	out=$(curl -sS -w '\n%{http_code}' --data-binary "$1" "${CH_URL}?database=${2:-default}") ||
		die "clickhouse: no answer"
	case "${out##*$'\n'}" in
		2??) printf '%s' "${out%$'\n'*}" ;;
		*) die "clickhouse: ${out%$'\n'*} (query: ${1:0:200})" ;;
	esac
}

# clickhouse-client over the native port: the engine's own ingest path.
ch_client() { clickhouse-client --host 127.0.0.1 --port $((CH_PORT + 1)) "$@"; }

# ch_targets PIPELINE DATABASE: creates DATABASE and in it the target of
# every table of PIPELINE, from replicant.sink_ddl().
ch_targets() {
	local stmt
	ch_q "CREATE DATABASE IF NOT EXISTS $2" >/dev/null
	psql_b -At -0 -c "SELECT replicant.sink_ddl('$1')" >"$WORK/ddl.sql"
	while IFS= read -r -d '' stmt || [ -n "$stmt" ]; do
		stmt=${stmt%$'\n'}
		[ -n "$stmt" ] && ch_q "$stmt" "$2" >/dev/null
	done <"$WORK/ddl.sql"
}

# ch_export DATABASE TABLE FILE: the target's rows as JSONEachRow, 64-bit
# integers as numbers (as replicant sends them).
ch_export() {
	curl -sSf --data-binary "SELECT * FROM $2 FORMAT JSONEachRow" \
		"${CH_URL}?database=$1&output_format_json_quote_64bit_integers=0" >"$3" ||
		die "clickhouse: export of $1.$2 failed"
}

# ch_client_insert DATABASE TABLE FILE -> seconds
ch_client_insert() {
	local t0
	t0=$(now)
	ch_client --database "$1" --query "INSERT INTO $2 FORMAT JSONEachRow" <"$3" ||
		die "clickhouse-client insert into $1.$2 failed"
	since "$t0"
}

ch_count() { ch_q "SELECT count() FROM $2" "$1" | tr -d '\n'; }

# The table both halves of scenario 7 use: ClickHouse-native types
# (Int64, Int32, String, Decimal, UInt8) and a timestamptz (String).
create_ch_table() {
	psql_b -c "CREATE TABLE $1 (id bigint PRIMARY KEY, k int NOT NULL, v text NOT NULL,
		amount numeric(12,2), flag boolean NOT NULL, created timestamptz NOT NULL DEFAULT now())"
}

scenario_7() {
	local n=$S7_ROWS m=$S7_BACKLOG tr=$S7_TXN_ROWS r c t0 inner last_end secs f got
	log "== scenario 7: ClickHouse ($n-row snapshot, $m-row backlog in $tr-row transactions, $ROUNDS rounds)"
	cluster_start s7
	ch_start
	record s7.clickhouse "$(ch_q 'SELECT version()' | tr -d '\n')"
	create_ch_table chs
	create_ch_table chb
	psql_b -c "CREATE SEQUENCE chb_id" -c "ALTER TABLE chb ALTER id SET DEFAULT nextval('chb_id')"
	psql_b <<SQL
INSERT INTO chs SELECT g, (g * 7) % 100000, 'customer ' || g || ' ordered something',
       (g % 100000) / 100.0, g % 3 = 0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
  FROM generate_series(1, $n) g;
VACUUM (FREEZE, ANALYZE) chs;
CHECKPOINT;
CREATE PUBLICATION ch_snap_pub FOR TABLE chs;
CREATE PUBLICATION ch_stream_pub FOR TABLE chb;
SQL
	bench_wait_setup
	bench_wait_snapshot_setup
	record s7.rows "$n"
	record s7.backlog_rows "$m"
	record s7.backlog_txn_rows "$tr"

	# Targets from sink_ddl(): s_R / b_R for replicant's round R, c_R / d_R
	# for clickhouse-client's (a template pipeline gives the snapshot's DDL).
	# (client_min_messages: create_pipeline's up-front TOAST warning for
	# tables without REPLICA IDENTITY FULL; this workload only inserts.)
	psql_b -c "SET client_min_messages = error" -c "SELECT replicant.create_pipeline('chddl', 'ch_snap_pub', '${CH_URL}?database=s_1', format => 'clickhouse')" >/dev/null
	for r in $(seq "$ROUNDS"); do
		ch_targets chddl "s_$r"
		ch_targets chddl "c_$r"
		psql_b -c "SET client_min_messages = error" -c "SELECT replicant.create_pipeline('chb$r', 'ch_stream_pub', '${CH_URL}?database=b_$r',
			format => 'clickhouse', batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS)" >/dev/null
		ch_targets "chb$r" "b_$r"
		ch_targets "chb$r" "d_$r"
		pipeline_wait_state "chb$r" streaming
		pipeline_disable "chb$r"
	done
	psql_b -c "SELECT replicant.drop_pipeline('chddl')" >/dev/null
	q "SELECT pg_create_logical_replication_slot('bench_td1', 'test_decoding')" >/dev/null

	# The backlog: every stream pipeline is disabled while it is written.
	f=$(script_file chb.sql <<SQL
INSERT INTO chb (k, v, amount, flag)
SELECT g, 'customer ' || g || ' ordered something', g / 100.0, g % 3 = 0 FROM generate_series(1, $tr) g;
SQL
)
	log "s7: backlog: $((m / tr)) transactions of $tr rows"
	PGB_OPTIONS="-c synchronous_commit=off" pgbench_b -n -c 2 -j 2 -t $((m / tr / 2)) -f "$f" >/dev/null 2>&1 ||
		die "s7: backlog workload failed"
	m=$(q "SELECT count(*) FROM chb")
	record s7.backlog_rows "$m"
	last_end=$(last_commit_end "$(workload_end_lsn)")
	q "CHECKPOINT" >/dev/null
	record s7.loadavg_before "$(loadavg)"

	# Snapshot: create_pipeline(snapshot => 'initial', 1 worker) until the
	# backfill is done, beside clickhouse-client inserting the rows the
	# first round delivered (exported from ClickHouse as JSONEachRow).
	for r in $(seq "$ROUNDS"); do
		for c in $(round_order "$r" rep client); do
			case $c in
				rep)
					t0=$(now)
					psql_b -c "SET client_min_messages = error" -c "SELECT replicant.create_pipeline('chs$r', 'ch_snap_pub', '${CH_URL}?database=s_$r',
						format => 'clickhouse', snapshot => 'initial', snapshot_workers => 1,
						batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS)" >/dev/null
					inner=$(psql_b -c "CALL bench_wait_snapshot('chs$r')" 2>&1 | sed -n 's/.*BENCH //p')
					[ -n "$inner" ] || die "s7: snapshot did not finish"
					record "s7.snap_rep_s.$r" "$(since "$t0")"
					psql_b -c "SELECT replicant.drop_pipeline('chs$r')" >/dev/null
					got=$(ch_count "s_$r" chs)
					[ "$got" = "$n" ] || die "s7: ClickHouse has $got of $n snapshot rows"
					[ -s "$WORK/chs.json" ] || ch_export s_1 chs "$WORK/chs.json"
					;;
				client)
					record "s7.snap_client_s.$r" "$(ch_client_insert "c_$r" chs "$WORK/chs.json")"
					;;
			esac
		done
	done
	record s7.snap_json_bytes "$(stat -c %s "$WORK/chs.json")"

	# Streamed backlog: enable_pipeline until its checkpoint reaches the
	# last commit, beside clickhouse-client inserting the same rows.
	for r in $(seq "$ROUNDS"); do
		for c in $(round_order "$r" rep client); do
			case $c in
				rep)
					read -r _ secs <<<"$(pipeline_catchup "chb$r" "$last_end")"
					[ -n "$secs" ] || die "s7: catch-up did not finish"
					record "s7.stream_rep_s.$r" "$secs"
					record s7.stream_requests "$(q "SELECT batches_delivered FROM replicant.status WHERE pipeline = 'chb$r'")"
					pipeline_disable "chb$r"
					got=$(ch_count "b_$r" chb)
					[ "$got" = "$m" ] || die "s7: ClickHouse has $got of $m backlog rows"
					[ -s "$WORK/chb.json" ] || ch_export b_1 chb "$WORK/chb.json"
					;;
				client)
					record "s7.stream_client_s.$r" "$(ch_client_insert "d_$r" chb "$WORK/chb.json")"
					;;
			esac
		done
	done
	record s7.loadavg_after "$(loadavg)"
	ch_stop
	cluster_stop
}
