# bench/scenarios.sh -- scenarios 1-6 and the sink alone, sourced by bench/run
# (7: scenarios_clickhouse.sh; 8-10: scenarios_growth.sh).
#
# Each scenario starts its own throwaway cluster (lib.sh cluster_start),
# measures, and only calls record KEY VALUE; bench/report.py computes the
# rates, ratios and targets from those raw values.

# Script files for pgbench live in WORK.
# pgbench_tps OUTPUT -> tps value
pgbench_tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$1"; }
script_file() { # script_file NAME <<< content
	cat >"$WORK/$1"
	chmod 644 "$WORK/$1"
	echo "$WORK/$1"
}
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# ------------------------------------------------- stream (scenarios 1, 2) --
#
# Catch-up method: every consumer's slot is created before the workload and
# replicant's pipelines are disabled while it runs, so afterwards each
# consumer decodes exactly the same WAL range from the same start, after the
# fact.  Measured, in an order that alternates between repetitions (ABBA)
# so that drift in background load does not favour one consumer:
#   decode-only   SELECT count(*) FROM pg_logical_slot_peek_changes(test_decoding)
#   w2j1, w2j2    pg_recvlogical + wal2json format-version 1 / 2 -> /dev/null
#   replicant     enable_pipeline -> checkpoint row reaches the last commit
# Each repetition has its own slots and pipeline; the best time of each is
# used (best-of-N is the usual estimate of a throughput on a noisy machine).
#
# stream_scenario ID TABLE WORKLOAD_ARGS... (pgbench arguments)
stream_scenario() {
	local id=$1 table=$2
	shift 2
	local r order c t0 out secs rows last_end wall start end

	LAST_END=
	psql_b -c "CREATE PUBLICATION bench_pub FOR TABLE $table"
	bench_wait_setup
	for r in $(seq "$REPS"); do
		pipeline_create "bench$r" bench_pub
		pipeline_wait_state "bench$r" streaming
		pipeline_disable "bench$r"
	done
	if [ "$PERF" = 1 ]; then
		pipeline_create benchperf bench_pub
		pipeline_wait_state benchperf streaming
		pipeline_disable benchperf
	fi
	for r in $(seq "$REPS"); do
		psql_b >/dev/null <<SQL
SELECT pg_create_logical_replication_slot('bench_td$r', 'test_decoding');
SELECT pg_create_logical_replication_slot('bench_w2j1_$r', 'wal2json');
SELECT pg_create_logical_replication_slot('bench_w2j2_$r', 'wal2json');
SQL
	done

	start=$(q "SELECT pg_current_wal_lsn()")
	log "$id: workload: pgbench $*"
	t0=$(now)
	out=$(pgbench_b "$@" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
	wall=$(since "$t0")
	end=$(workload_end_lsn)
	record "$id.workload_s" "$wall"
	record "$id.workload_tps" "$(pgbench_tps "$out")"
	record "$id.wal_bytes" "$(q "SELECT pg_wal_lsn_diff('$end', '$start')")"
	record "$id.rows" "$(q "SELECT count(*) FROM $table")"
	# Flush dirty buffers now rather than during a measurement.
	q "CHECKPOINT" >/dev/null
	record "$id.loadavg_before" "$(loadavg)"

	for r in $(seq "$REPS"); do
		if [ $((r % 2)) = 1 ]; then order="td w2j1 w2j2 rep"; else order="rep w2j2 w2j1 td"; fi
		for c in $order; do
			case $c in
				td)
					read -r secs rows last_end <<<"$(anchor_decode_only_slot "bench_td$r" "$end")"
					record "$id.decode_only_s.$r" "$secs"
					record "$id.decode_only_rows" "$rows"
					LAST_END=$last_end
					;;
				w2j1) record "$id.w2j1_s.$r" "$(anchor_recvlogical "bench_w2j1_$r" "$end" 1)" ;;
				w2j2) record "$id.w2j2_s.$r" "$(anchor_recvlogical "bench_w2j2_$r" "$end" 2)" ;;
				rep)
					[ -n "${LAST_END:-}" ] || LAST_END=$(last_commit_end "$end")
					sink_get reset >/dev/null
					read -r secs wall <<<"$(pipeline_catchup "bench$r" "$LAST_END")"
					[ -n "$wall" ] || die "replicant catch-up did not finish"
					record "$id.replicant_start_s.$r" "$secs"
					record "$id.replicant_s.$r" "$wall"
					stats=$(sink_get stats)
					record "$id.sink_requests" "$(json_field "$stats" requests)"
					record "$id.sink_bytes" "$(json_field "$stats" body_bytes)"
					record "$id.replicant_changes" "$(q "SELECT changes_delivered FROM replicant.status WHERE pipeline = 'bench$r'")"
					pipeline_disable "bench$r"
					;;
			esac
		done
	done
	record "$id.loadavg_after" "$(loadavg)"

	if [ "$PERF" = 1 ]; then
		# Profiled separately, so that perf's overhead is in no measurement.
		log "$id: perf profile of a separate catch-up"
		perf_start_on_enable benchperf "$id-catchup"
		pipeline_wait_acked benchperf "$LAST_END" >/dev/null
		perf_stop
		pipeline_disable benchperf
	fi

	if [ "$STREAM" = 1 ]; then
		# Streaming during the workload: the same workload again with one
		# pipeline enabled.  Reported: workload TPS (against the run above,
		# where every pipeline was disabled) and the time from the end of
		# the workload until the sink has acknowledged everything.
		local sp=bench1
		q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'bench\_%'" >/dev/null
		q "SELECT pg_create_logical_replication_slot('bench_tds', 'test_decoding')" >/dev/null
		psql_b -c "SELECT replicant.enable_pipeline('$sp')" >/dev/null
		pipeline_wait_state "$sp" streaming
		log "$id: streaming run: pgbench $*"
		local wpid cpu0 t_end
		wpid=$(worker_pid "$sp")
		cpu0=$(proc_cpu_s "$wpid")
		t0=$(now)
		out=$(pgbench_b "$@" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
		t_end=$(now)
		record "$id.stream_worker_cpu_s" "$(calc "$(proc_cpu_s "$wpid") - $cpu0")"
		record "$id.stream_workload_s" "$(since "$t0")"
		record "$id.stream_workload_tps" "$(pgbench_tps "$out")"
		end=$(workload_end_lsn)
		record "$id.stream_drain_s" "$(drain_seconds "$sp" "$t_end" "$(last_published_end bench_tds "$end")")"
	fi
}

# decode-only on a given slot: "seconds rows last_end_lsn"
anchor_decode_only_slot() {
	local slot=$1 end=$2 t0 out
	t0=$(now)
	out=$(q "SELECT count(*) || ' ' || max(lsn) FROM pg_logical_slot_peek_changes('$slot', '$end', NULL)")
	echo "$(since "$t0") $out"
}

# The end of the last commit record at or before END (when no decode-only
# run told us yet): peek with test_decoding, untimed.
last_commit_end() {
	q "SELECT max(lsn) FROM pg_logical_slot_peek_changes('bench_td1', '$1', NULL)"
}

# Streaming: waits until the pipeline has acknowledged every transaction
# committed before LSN, i.e. its slot's confirmed position passed LSN or the
# lag is only its own checkpoint writes.  Uses the status view's
# confirmed_flush_lsn, which the worker advances right after each
# checkpoint and, when a burst found nothing to send, to the end of what it
# read.
wait_drained() {
	local name=$1 lsn=$2
	psql_b -c "DO \$\$ BEGIN LOOP EXIT WHEN (SELECT confirmed_flush_lsn >= '$lsn' FROM replicant.status WHERE pipeline = '$name'); PERFORM pg_sleep(0.002); END LOOP; END \$\$"
}

# perf_start_on_enable NAME TAG: starts a machine-wide recording, enables
# the pipeline and sets the report filter to its worker's pid.
perf_start_on_enable() {
	local pid=""
	perf_start_system "$2"
	pid=$(enable_find_worker "$1")
	[ -n "$pid" ] || die "no worker for $1"
	PERF_FILTER_PID=$pid
}

# The table scenarios 1 and 2 write and stream.
create_stream_table() {
	psql_b -c "CREATE TABLE $1 (id bigserial PRIMARY KEY, k int NOT NULL, v text NOT NULL,
		amount numeric(12,2), created timestamptz NOT NULL DEFAULT now())"
}

scenario_1() {
	local n=$S1_TXNS per
	per=$((n / 2))
	log "== scenario 1: stream, small transactions ($n single-row INSERT transactions, 2 clients)"
	cluster_start s1
	sink_start
	create_stream_table small
	stream_scenario s1 small -n -c 2 -j 2 -t "$per" -f "$(small_insert_script small)"
	sink_stop
	cluster_stop
}

scenario_2() {
	local rows=$S2_ROWS txn_rows=10000 txns
	txns=$((rows / txn_rows))
	log "== scenario 2: stream, bulk transactions ($rows rows in $txns transactions of $txn_rows)"
	cluster_start s2
	sink_start
	create_stream_table bulk
	local f
	f=$(script_file bulk.sql <<SQL
INSERT INTO bulk (k, v, amount)
SELECT g, 'customer ' || g || ' ordered something', g / 100.0 FROM generate_series(1, $txn_rows) g;
SQL
)
	# 2 clients, as in scenario 1; each transaction is one 10,000-row INSERT.
	stream_scenario s2 bulk -n -c 2 -j 2 -t $((txns / 2)) -f "$f"
	sink_stop
	cluster_stop
}

# ---------------------------------------------------------- 3: snapshot --

# The peak memory of the replicant pipeline and snapshot workers, sampled
# every 0.05 s by one bench/memsample.py (~1 % of a core) started before the
# timed runs: the largest VmRSS, RssAnon and VmHWM (kB) any one of them had
# since the last mem_sampler_reset.  VmRSS counts the shared buffers a
# worker touched (the table itself, read through shared memory); RssAnon is
# the worker's private memory; VmHWM is the kernel's own high-water mark of
# VmRSS (so it also catches a peak between two samples).
MEM_SAMPLER_PID=""
mem_sampler_start() {
	rm -f "$WORK/mem.peaks"
	python3 "$BENCH_DIR/memsample.py" "$WORK/mem.peaks" &
	MEM_SAMPLER_PID=$!
	# Its first sample: from then on it takes SIGUSR1.
	for _ in $(seq 600); do
		[ -s "$WORK/mem.peaks" ] && return 0
		sleep 0.05
	done
	die "the memory sampler did not start"
}
# mem_sampler_reset: new peaks from here on (returns once the sampler has
# taken them up).
mem_sampler_reset() {
	local gen
	gen=$(($(mem_sampler_read | cut -d' ' -f1) + 1))
	kill -USR1 "$MEM_SAMPLER_PID"
	for _ in $(seq 600); do
		[ "$(mem_sampler_read | cut -d' ' -f1)" -ge "$gen" ] && return 0
		sleep 0.05
	done
	die "the memory sampler does not answer"
}
# mem_sampler_read: "generation rss anon hwm" since the last reset.
mem_sampler_read() { cat "$WORK/mem.peaks" 2>/dev/null || echo "-1 0 0 0"; }
mem_sampler_stop() {
	kill "$MEM_SAMPLER_PID" 2>/dev/null || true
	wait "$MEM_SAMPLER_PID" 2>/dev/null || true
}

# s3_profile TAG WHERE PSQL-ARGS...: runs psql (-c ... each its own
# transaction) under a machine-wide perf recording whose report keeps the
# processes pg_stat_activity shows WHERE.
s3_profile() {
	local tag=$1 where=$2 collector
	shift 2
	perf_start_system "$tag"
	(
		for _ in $(seq 3000); do
			q "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE $where"
			sleep 0.1
		done
	) >"$WORK/$tag.pids" 2>/dev/null &
	collector=$!
	psql_b "$@" >/dev/null 2>&1
	kill "$collector" 2>/dev/null || true
	wait "$collector" 2>/dev/null || true
	PERF_FILTER_PID=$(tr ',' '\n' <"$WORK/$tag.pids" | grep -E '^[0-9]+$' | sort -u | paste -sd, -)
	perf_stop
}

scenario_3() {
	local n=$S3_ROWS t0 half inner
	log "== scenario 3: snapshot ($n rows)"
	cluster_start s3
	sink_start
	create_snap_table "$n"
	record s3.rows "$n"
	record s3.table_bytes "$(q "SELECT pg_table_size('snap')")"
	record s3.loadavg_before "$(loadavg)"

	# Warm the cache so that every reader finds the table in shared buffers.
	q "SELECT count(*) FROM snap" >/dev/null
	bench_wait_snapshot_setup

	# replicant: snapshot => 'initial' with 1 and with 2 shard workers, in
	# ABBA order over the repetitions.  Each run is a new pipeline (its own
	# slot and snapshot), dropped afterwards.  Every time here is the
	# server's clock in one session (sql_seconds, snapshot_seconds), so no
	# psql start is in it.
	local r w order total inner rss anon
	mem_sampler_start
	for r in $(seq "$REPS"); do
		if [ $((r % 2)) = 1 ]; then order="1 2"; else order="2 1"; fi
		for w in $order; do
			sink_get reset >/dev/null
			mem_sampler_reset
			# From the create_pipeline call (the worker starts at its
			# commit) to every table's backfill done and the pipeline
			# streaming.
			read -r total inner < <(snapshot_seconds "snap${w}_$r" "'snap_pub',
					'http://127.0.0.1:$SINK_PORT/', snapshot => 'initial', snapshot_workers => $w,
					batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS") || true
			[ -n "$inner" ] || die "s3: the ${w}-worker snapshot did not finish"
			read -r _ rss anon _ < <(mem_sampler_read)
			record "s3.peak_rss_kb_${w}w.$r" "${rss:-0}"
			record "s3.peak_anon_kb_${w}w.$r" "${anon:-0}"
			record "s3.replicant_${w}w_s.$r" "$total"
			record "s3.replicant_${w}w_inner_s.$r" "$inner"
			record "s3.replicant_rows_done" "$(q "SELECT sum(rows_done) FROM replicant.backfill_status WHERE pipeline = 'snap${w}_$r'")"
			record "s3.sink_bytes" "$(json_field "$(sink_get stats)" body_bytes)"
			record "s3.sink_requests" "$(json_field "$(sink_get stats)" requests)"
			psql_b -c "SELECT replicant.drop_pipeline('snap${w}_$r')" >/dev/null
		done
	done
	mem_sampler_stop
	if [ "$PERF" = 1 ] && [ "$(q "SELECT count(*) FROM replicant.pipelines")" = 0 ]; then
		# Whole-machine profiles (shard workers, pipeline worker, sink) of
		# a separate 1-worker and 2-worker snapshot, and of the COPY text
		# it is compared with; not timed.  The reports keep this cluster's
		# processes named by the WHERE clause, collected while they run.
		local w
		for w in 1 2; do
			log "s3: perf profile of a separate ${w}-worker snapshot (system-wide)"
			s3_profile "s3-snapshot-${w}w" "backend_type LIKE 'replicant%'" \
				-c "SELECT replicant.create_pipeline('snapperf', 'snap_pub', 'http://127.0.0.1:$SINK_PORT/', snapshot => 'initial', snapshot_workers => $w)" \
				-c "CALL bench_wait_snapshot('snapperf')"
			psql_b -c "SELECT replicant.drop_pipeline('snapperf')" >/dev/null
		done
		log "s3: perf profile of COPY snap TO '/dev/null' (text)"
		s3_profile s3-copy-text "query LIKE 'COPY snap TO%'" -c "COPY snap TO '/dev/null'"
	fi

	for r in $(seq "$REPS"); do
		record "s3.copy_json_s.$r" "$(sql_seconds "COPY (SELECT row_to_json(t) FROM snap t) TO '/dev/null';")"
		record "s3.copy_text_s.$r" "$(sql_seconds "COPY snap TO '/dev/null';")"
		# Replicant's own encoder (the one the snapshot path will use) over
		# the same rows in one backend: an upper bound for a 1-worker
		# snapshot, HTTP excluded.  The session is put on the encoder's
		# pinned settings first, as the worker is, so no GUC is switched
		# per row.
		record "s3.copy_encoder_s.$r" "$(sql_seconds "
SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET TimeZone = 'UTC';
SET extra_float_digits = 1; SET bytea_output = 'hex'; SET lc_monetary = 'C';
SET search_path = pg_catalog;
COPY (SELECT replicant._encode_row(t) FROM public.snap t) TO '/dev/null';")"
		# Two COPY(row_to_json) at once over the two halves of the heap
		# (TID Range Scans, as replicant's shards): what two workers can get
		# out of this 2-core machine at best.
		half=$(q "SELECT pg_relation_size('snap') / 8192 / 2")
		t0=$(now)
		q "COPY (SELECT row_to_json(t) FROM snap t WHERE ctid < '($half,0)') TO '/dev/null'" >/dev/null &
		local p1=$!
		q "COPY (SELECT row_to_json(t) FROM snap t WHERE ctid >= '($half,0)') TO '/dev/null'" >/dev/null
		wait "$p1"
		record "s3.copy_json_2way_s.$r" "$(since "$t0")"
	done
	record s3.loadavg_after "$(loadavg)"
	sink_stop
	cluster_stop
}

# ----------------------------------------------------------- 4: latency --
#
# Commit-to-consumer latency at steady rates of single-row INSERTs (4
# clients, pgbench --rate), each rate in ROUNDS interleaved rounds of
# replicant (the C sink answers at once, 204) and pg_recvlogical + wal2json
# format-version 2 (its output piped into the same sink program, -i).  Per
# row: arrival of the bytes that carry it - the row's ts, which is
# clock_timestamp() in the INSERT, just before the commit.  Also the
# consumer's CPU: the pipeline worker, or walsender + pg_recvlogical.

# latency_round_rep RATE R: one replicant round.
latency_round_rep() {
	local rate=$1 r=$2 out lat wpid cpu0 k id="s4.$1"
	sink_start -l -c ts
	psql_b -c "SELECT replicant.enable_pipeline('lat')" >/dev/null
	pipeline_wait_state lat streaming
	# What piled up while the pipeline was disabled is not this round's.
	wait_drained lat "$(q "SELECT pg_current_wal_lsn()")" >/dev/null
	sink_get reset >/dev/null
	wpid=$(worker_pid lat)
	cpu0=$(proc_cpu_s "$wpid")
	out=$(pgbench_b -n -c 4 -j 2 --rate="$rate" -T "$S4_SECS" -f "$WORK/lat.sql" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
	record "$id.rep_cpu_s.$r" "$(calc "$(proc_cpu_s "$wpid") - $cpu0")"
	record "$id.rep_tps.$r" "$(pgbench_tps "$out")"
	wait_drained lat "$(q "SELECT pg_current_wal_lsn()")" >/dev/null
	lat=$(sink_get latency)
	record "$id.rep_rows.$r" "$(json_field "$lat" n)"
	record "$id.rep_requests.$r" "$(json_field "$lat" requests)"
	for k in p50 p95 p99 max; do
		record "$id.rep_${k}_ms.$r" "$(json_field "$lat" "${k}_ms")"
	done
	cp "$WORK/latency_samples.txt" "$OUTDIR/latency-samples-us-$rate-replicant-$r.txt" 2>/dev/null || true
	pipeline_disable lat
	sink_stop
}

# w2j_start: pg_recvlogical + wal2json v2 on a slot created for it (so
# that it starts with what commits next), its output piped into the sink
# (-i); sets W2J_WALSENDER and W2J_RECVLOGICAL, the pids.
w2j_start() {
	q "SELECT pg_create_logical_replication_slot('bench_lat', 'wal2json')" >/dev/null
	rm -f "$WORK/recvlogical.pid"
	# pg_recvlogical's pid through exec, so that it is stopped by its id.
	as_pg bash -c "echo \$\$ >'$WORK/recvlogical.pid'; exec env PGOPTIONS='-c TimeZone=UTC' \
		'$BINDIR/pg_recvlogical' -h '$SOCKDIR' -p '$PGPORT' -d bench -S bench_lat --start \
		-o format-version=2 -o include-transaction=false -F 0 -f - 2>>'$WORK/recvlogical.log'" |
		"$WORK/bin/sink" -p "$SINK_PORT" -l -c value -i -o "$WORK/latency_samples.txt" 2>>"$WORK/sink.log" &
	SINK_PID=$!
	W2J_WALSENDER=
	for _ in $(seq 200); do
		W2J_WALSENDER=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_lat'")
		[ -n "$W2J_WALSENDER" ] && sink_get stats >/dev/null 2>&1 && break
		sleep 0.05
	done
	[ -n "$W2J_WALSENDER" ] || die "s4: pg_recvlogical did not connect"
	W2J_RECVLOGICAL=$(cat "$WORK/recvlogical.pid")
}

w2j_stop() {
	kill -INT "$W2J_RECVLOGICAL" 2>/dev/null || true
	sink_stop
	for _ in $(seq 100); do
		[ -z "$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_lat'")" ] && break
		sleep 0.05
	done
	q "SELECT pg_drop_replication_slot('bench_lat')" >/dev/null
}

# latency_round_w2j RATE R: one pg_recvlogical + wal2json v2 round.
latency_round_w2j() {
	local rate=$1 r=$2 out lat cpu0 k n0 want id="s4.$1"
	w2j_start
	sink_get reset >/dev/null
	cpu0=$(calc "$(proc_cpu_s "$W2J_WALSENDER") + $(proc_cpu_s "$W2J_RECVLOGICAL")")
	n0=$(q "SELECT coalesce(max(id), 0) FROM lat")
	out=$(pgbench_b -n -c 4 -j 2 --rate="$rate" -T "$S4_SECS" -f "$WORK/lat.sql" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
	record "$id.w2j_tps.$r" "$(pgbench_tps "$out")"
	want=$(q "SELECT count(*) FROM lat WHERE id > $n0")
	for _ in $(seq 600); do
		[ "$(json_field "$(sink_get stats)" rows)" -ge "$want" ] && break
		sleep 0.05
	done
	record "$id.w2j_cpu_s.$r" "$(calc "$(proc_cpu_s "$W2J_WALSENDER") + $(proc_cpu_s "$W2J_RECVLOGICAL") - $cpu0")"
	lat=$(sink_get latency)
	record "$id.w2j_rows.$r" "$(json_field "$lat" n)"
	for k in p50 p95 p99 max; do
		record "$id.w2j_${k}_ms.$r" "$(json_field "$lat" "${k}_ms")"
	done
	w2j_stop
}

scenario_4() {
	local rate r c rates
	IFS=, read -r -a rates <<<"$S4_RATES"
	log "== scenario 4: latency (steady ${S4_RATES} single-row txn/s, $ROUNDS rounds of ${S4_SECS}s per consumer and rate)"
	cluster_start s4
	psql_b -c "CREATE TABLE lat (id bigserial PRIMARY KEY, payload text NOT NULL,
		ts timestamptz NOT NULL DEFAULT clock_timestamp())"
	psql_b -c "CREATE PUBLICATION lat_pub FOR TABLE lat"
	script_file lat.sql >/dev/null <<'SQL'
INSERT INTO lat (payload) VALUES ('latency probe row');
SQL
	sink_start
	pipeline_create lat lat_pub
	pipeline_wait_state lat streaming
	pipeline_disable lat
	sink_stop
	record s4.rates "$S4_RATES"
	record s4.loadavg_before "$(loadavg)"
	for rate in "${rates[@]}"; do
		for r in $(seq "$ROUNDS"); do
			for c in $(round_order "$r" rep w2j); do
				log "s4: $rate txn/s, round $r: $c"
				"latency_round_$c" "$rate" "$r"
			done
		done
	done
	record s4.loadavg_after "$(loadavg)"
	[ "$PERF" = 1 ] && for rate in "${rates[@]}"; do latency_perf "$rate"; done
	cluster_stop
}

# latency_perf RATE: a separate replicant run only for the worker's profile
# (perf is in no measurement).
latency_perf() {
	local rate=$1
	log "s4: perf profile of the worker at $rate txn/s (${S4_SECS}s, not measured)"
	sink_start -l -c ts
	psql_b -c "SELECT replicant.enable_pipeline('lat')" >/dev/null
	pipeline_wait_state lat streaming
	wait_drained lat "$(q "SELECT pg_current_wal_lsn()")" >/dev/null
	perf_start "$(worker_pid lat)" "s4-$rate"
	pgbench_b -n -c 4 -j 2 --rate="$rate" -T "$S4_SECS" -f "$WORK/lat.sql" >/dev/null 2>&1
	perf_stop
	# From a wake-up to the first byte out, by step: the worker's, then the
	# walsender's (whose bytes then cross pg_recvlogical and a pipe).
	log "s4: wake-up to send at $rate txn/s, worker then walsender (${S4_SECS}s each, not measured)"
	wake_trace_start "$(worker_pid lat)"
	pgbench_b -n -c 4 -j 2 --rate="$rate" -T "$S4_SECS" -f "$WORK/lat.sql" >/dev/null 2>&1
	wake_trace_stop "s4.$rate.rep_wake"
	pipeline_disable lat
	sink_stop
	w2j_start
	wake_trace_start "$W2J_WALSENDER"
	pgbench_b -n -c 4 -j 2 --rate="$rate" -T "$S4_SECS" -f "$WORK/lat.sql" >/dev/null 2>&1
	wake_trace_stop "s4.$rate.w2j_wake"
	w2j_stop
}

# ------------------------------------------------------------ 5: memory --

scenario_5() {
	local n=$S5_ROWS start end pid hwm rss anon peak_rss=0 peak_anon=0 t0 wall p
	log "== scenario 5: worker memory on one transaction of $n rows (~500 bytes each)"
	cluster_start s5
	sink_start
	psql_b -c "CREATE TABLE big (id bigint PRIMARY KEY, pad text NOT NULL, created timestamptz NOT NULL DEFAULT now())"
	psql_b -c "CREATE PUBLICATION big_pub FOR TABLE big"
	bench_wait_setup
	pipeline_create big big_pub
	pipeline_wait_state big streaming
	pipeline_disable big
	log "s5: inserting $n rows in one transaction"
	start=$(q "SELECT pg_current_wal_lsn()")
	t0=$(now)
	# 15 x md5 = 480 characters: ~500-byte rows, not TOASTed, not compressed.
	q "INSERT INTO big (id, pad) SELECT g, repeat(md5(g::text), 15) FROM generate_series(1, $n) g" >/dev/null
	record s5.insert_s "$(since "$t0")"
	end=$(workload_end_lsn)
	q "CHECKPOINT" >/dev/null
	record s5.rows "$n"
	record s5.table_bytes "$(q "SELECT pg_table_size('big')")"
	record s5.wal_bytes "$(q "SELECT pg_wal_lsn_diff('$end', '$start')")"
	record s5.loadavg_before "$(loadavg)"

	sink_get reset >/dev/null
	# Catch-up in the background; sample the worker's memory meanwhile.  The
	# big transaction is the only one published since the pipeline was
	# disabled, so it is acknowledged once the checkpoint row passes the
	# WAL position taken before the INSERT.
	# (--perf: this delivery is profiled as it is measured; only its
	# memory is a target, and perf does not change that.)
	perf_start_system s5-one-big-txn
	pipeline_catchup big "$start" >"$WORK/s5.catchup" &
	p=$!
	t0=$(now)
	pid=""
	while kill -0 "$p" 2>/dev/null; do
		if [ -z "$pid" ]; then
			pid=$(worker_pid big)
			PERF_FILTER_PID=$pid
		fi
		if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
			rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
			anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")
			[ "${rss:-0}" -gt "$peak_rss" ] && peak_rss=$rss
			[ "${anon:-0}" -gt "$peak_anon" ] && peak_anon=$anon
		fi
		sleep 0.1
	done
	wait "$p"
	perf_stop
	read -r _ wall <"$WORK/s5.catchup"
	[ -n "$wall" ] || die "s5: catch-up did not finish"
	# VmHWM: the kernel's own peak RSS over the worker's life, which began
	# with this catch-up (the pipeline was disabled during the insert).
	hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
	record s5.worker_vmhwm_kb "$hwm"
	record s5.worker_peak_rss_kb "$peak_rss"
	record s5.worker_peak_anon_kb "$peak_anon"
	record s5.replicant_s "$wall"
	stats=$(sink_get stats)
	record s5.sink_requests "$(json_field "$stats" requests)"
	record s5.sink_bytes "$(json_field "$stats" body_bytes)"
	record s5.replicant_changes "$(q "SELECT changes_delivered FROM replicant.status WHERE pipeline = 'big'")"
	record s5.loadavg_after "$(loadavg)"
	sink_stop
	cluster_stop
}

# ---------------------------------------------------- 6: source overhead --

scenario_6() {
	local secs=$S6_SECS scale=$S6_SCALE clients=4 slices=$S6_SLICES slice mode i out tps t_end end wpid cpu0
	slice=$((secs / slices))
	log "== scenario 6: source overhead (pgbench TPC-B-like, scale $scale, $clients clients, $secs s per mode in $slices slices)"
	cluster_start s6
	sink_start
	pgbench_b -i -q -s "$scale" >/dev/null 2>&1 || die "pgbench -i failed"
	psql_b -c "CREATE PUBLICATION pgbench_pub FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"
	bench_wait_setup
	pipeline_create pgb pgbench_pub
	pipeline_wait_state pgb streaming
	pipeline_disable pgb
	# Warm-up, so that the first measured slice is not the cold one.
	pgbench_b -n -M prepared -c "$clients" -j 2 -T "$S6_WARMUP" >/dev/null 2>&1
	psql_b -c "VACUUM ANALYZE" -c "CHECKPOINT"
	record s6.loadavg_before "$(loadavg)"
	record s6.slice_s "$slice"

	# "without" = pipeline disabled (no worker; its slot, which costs the
	# source nothing, stays); "with" = enabled and caught up before the
	# slice starts, so a slice never pays for the previous one's WAL.  The
	# two modes alternate in ABBA order in slices, so that the background
	# load of this shared machine drifts into both alike.
	for i in $(seq $((slices * 2))); do
		case $((i % 4)) in 1 | 0) mode=without ;; *) mode=with ;; esac
		if [ "$mode" = with ]; then
			psql_b -c "SELECT replicant.enable_pipeline('pgb')" >/dev/null
			pipeline_wait_state pgb streaming
			wait_drained pgb "$(q "SELECT pg_current_wal_lsn()")" >/dev/null
			# Only to find this slice's last commit afterwards (a slot
			# nobody reads costs the source nothing).
			q "SELECT pg_create_logical_replication_slot('bench_tds', 'test_decoding')" >/dev/null
		else
			pipeline_disable pgb
		fi
		[ "$mode" = with ] && { wpid=$(worker_pid pgb); cpu0=$(proc_cpu_s "$wpid"); }
		out=$(pgbench_b -n -M prepared -c "$clients" -j 2 -T "$slice" 2>&1) || { echo "$out" >&2; die "pgbench failed"; }
		t_end=$(now)
		tps=$(pgbench_tps "$out")
		record "s6.tps_$mode.$i" "$tps"
		if [ "$mode" = with ]; then
			record "s6.worker_cpu_s.$i" "$(calc "$(proc_cpu_s "$wpid") - $cpu0")"
			record "s6.lag_bytes_at_end.$i" "$(q "SELECT lag_bytes FROM replicant.status WHERE pipeline = 'pgb'")"
			end=$(workload_end_lsn)
			record "s6.drain_s.$i" "$(drain_seconds pgb "$t_end" "$(last_published_end bench_tds "$end")")"
			q "SELECT pg_drop_replication_slot('bench_tds')" >/dev/null
		fi
	done
	record s6.replicant_txns "$(q "SELECT transactions_delivered FROM replicant.status WHERE pipeline = 'pgb'")"
	record s6.replicant_batches "$(q "SELECT batches_delivered FROM replicant.status WHERE pipeline = 'pgb'")"
	record s6.loadavg_after "$(loadavg)"
	if [ "$PERF" = 1 ]; then
		# A separate run only for the profile (perf is in no measurement).
		log "s6: perf profile of the worker during a separate ${S6_PERF_SECS}s run"
		psql_b -c "SELECT replicant.enable_pipeline('pgb')" >/dev/null
		pipeline_wait_state pgb streaming
		wait_drained pgb "$(q "SELECT pg_current_wal_lsn()")" >/dev/null
		perf_start "$(worker_pid pgb)" s6-streaming
		pgbench_b -n -M prepared -c "$clients" -j 2 -T "$S6_PERF_SECS" >/dev/null 2>&1
		perf_stop
	fi
	sink_stop
	cluster_stop
}

# ------------------------------------------------------ 0: the sink alone --

scenario_sink() {
	local size out
	log "== sink alone: one keep-alive connection, one request in flight"
	sink_start
	for size in 256 65536 1048576 8388608; do
		out=$("$WORK/bin/sinkload" "$SINK_PORT" "$size" "$SINK_SECS")
		record "sink.req_per_s.$size" "$(sed 's/.*req_per_s=\([0-9.]*\).*/\1/' <<<"$out")"
		record "sink.mb_per_s.$size" "$(sed 's/.*mb_per_s=\([0-9.]*\).*/\1/' <<<"$out")"
	done
	sink_stop
}
