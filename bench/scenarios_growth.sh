# bench/scenarios_growth.sh -- scenarios 8-10, sourced by bench/run: how far
# catch-up is from the cheapest decoder (pgoutput), and how cost grows with
# the number of pipelines and the size of a snapshot.

# The single-row INSERT script of scenarios 1, 8 and 9 (table: create_stream_table).
small_insert_script() {
	script_file "small_$1.sql" <<SQL
\set k random(1, 1000000)
INSERT INTO $1 (k, v, amount) VALUES (:k, 'customer ' || :k || ' ordered something', :k / 100.0);
SQL
}

# Pipelines NAME1..NAMEn on PUB, created, started once, then disabled:
# each keeps its slot's position while the workload runs.
pipelines_create_disabled() { # PREFIX FIRST LAST PUB
	local i
	for i in $(seq "$2" "$3"); do
		pipeline_create "$1$i" "$4"
	done
	for i in $(seq "$2" "$3"); do
		pipeline_wait_state "$1$i" streaming
		pipeline_disable "$1$i"
	done
}

# ------------------------------------------------- 8: catch-up vs pgoutput --
#
# Target 4 (bench/RESULTS.md): 200k single-row transactions; replicant's catch-up
# beside the in-server decode-only limit of pgoutput over the same WAL:
#   SELECT count(*) FROM pg_logical_slot_peek_binary_changes(slot, end, NULL,
#          'proto_version', '1', 'publication_names', PUB)
# on a slot created at the same point as replicant's.  A peek does not
# consume, so one pgoutput slot serves every round; each replicant round has
# its own pipeline.  Then the same for bulk transactions (1M rows in 100
# transactions, informational).  Workloads run with synchronous_commit off
# (only the WAL they leave matters here).
#
# pgoutput_rounds ID TABLE COUNT_KIND PGBENCH_ARGS...
pgoutput_rounds() {
	local id=$1 table=$2 kind=$3 r c t0 end last_end secs start_s cnt pid cpu0 cpu1 out
	shift 3
	create_stream_table "$table"
	psql_b -c "CREATE PUBLICATION ${id}_pub FOR TABLE $table"
	pipelines_create_disabled "${id}_" 1 "$ROUNDS" "${id}_pub"
	if [ "$PERF" = 1 ]; then
		pipeline_create "${id}_perf" "${id}_pub"
		pipeline_wait_state "${id}_perf" streaming
		pipeline_disable "${id}_perf"
	fi
	psql_b >/dev/null <<SQL
SELECT pg_create_logical_replication_slot('bench_po', 'pgoutput');
SELECT pg_create_logical_replication_slot('bench_td1', 'test_decoding');
SQL
	log "$id: workload: pgbench $*"
	PGB_OPTIONS="-c synchronous_commit=off" pgbench_b "$@" >/dev/null 2>&1 || die "$id: workload failed"
	end=$(workload_end_lsn)
	last_end=$(last_commit_end "$end")
	record "$id.$kind" "$(q "SELECT count(*) FROM $table")"
	record "$id.wal_bytes" "$(q "SELECT pg_wal_lsn_diff('$end', confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name = 'bench_po'")"
	q "CHECKPOINT" >/dev/null
	record "$id.loadavg_before" "$(loadavg)"
	for r in $(seq "$ROUNDS"); do
		for c in $(round_order "$r" pgoutput rep); do
			case $c in
				pgoutput)
					t0=$(now)
					out=$(psql_b -At -c "SELECT bench_cpu_s()" \
						-c "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('bench_po', '$end', NULL,
							'proto_version', '1', 'publication_names', '${id}_pub')" -c "SELECT bench_cpu_s()")
					secs=$(since "$t0")
					read -r cpu0 cnt cpu1 <<<"$(paste -sd' ' <<<"$out")"
					[ -n "$cpu1" ] || die "$id: the pgoutput peek printed no CPU figures"
					record "$id.pgoutput_s.$r" "$secs"
					record "$id.pgoutput_messages" "$cnt"
					record "$id.pgoutput_cpu_s.$r" "$(calc "$cpu1 - $cpu0")"
					;;
				rep)
					read -r start_s secs <<<"$(pipeline_catchup "${id}_$r" "$last_end")"
					[ -n "$secs" ] || die "$id: catch-up did not finish"
					record "$id.replicant_s.$r" "$secs"
					record "$id.replicant_start_s.$r" "$start_s"
					record "$id.replicant_changes" "$(q "SELECT changes_delivered FROM replicant.status WHERE pipeline = '${id}_$r'")"
					pid=$(worker_pid "${id}_$r")
					[ -n "$pid" ] || die "$id: no worker after the catch-up of ${id}_$r"
					record "$id.replicant_cpu_s.$r" "$(proc_cpu_s "$pid")"
					record "$id.replicant_runq_s.$r" "$(proc_runq_s "$pid")"
					pipeline_disable "${id}_$r"
					;;
			esac
		done
	done
	if [ "$PERF" = 1 ]; then
		# Profiled apart from the timed rounds: the peek's backend, then a
		# catch-up by the worker of one more pipeline, over the same WAL.
		# Where each one's CPU goes, by kind (bench/decode_share.py).
		log "$id: perf profiles of a pgoutput peek and of a catch-up"
		share_perf_start
		psql_b -At -c "SELECT pg_backend_pid()" \
			-c "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('bench_po', '$end', NULL,
				'proto_version', '1', 'publication_names', '${id}_pub')" >"$WORK/peek.out"
		share_perf_stop "$(head -1 "$WORK/peek.out")" "$id" pgoutput
		share_perf_start
		pid=$(enable_find_worker "${id}_perf")
		pipeline_wait_acked "${id}_perf" "$last_end" >/dev/null
		share_perf_stop "$pid" "$id" share
		pipeline_disable "${id}_perf"
	fi
	psql_b -c "SELECT replicant.drop_pipeline(name) FROM replicant.pipelines" >/dev/null
	q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name IN ('bench_po', 'bench_td1')" >/dev/null
}

scenario_8() {
	local n=$S8_TXNS rows=$S8_BULK_ROWS txn_rows=10000 f
	log "== scenario 8: catch-up vs pgoutput decode-only ($n single-row txns; $rows rows in $txn_rows-row txns; $ROUNDS rounds)"
	cluster_start s8
	sink_start
	bench_wait_setup
	pgoutput_rounds s8 small txns -n -c 2 -j 2 -t $((n / 2)) -f "$(small_insert_script small)"
	if [ "$rows" -gt 0 ]; then
		f=$(script_file bulk8.sql <<SQL
INSERT INTO bulk (k, v, amount)
SELECT g, 'customer ' || g || ' ordered something', g / 100.0 FROM generate_series(1, $txn_rows) g;
SQL
)
		pgoutput_rounds s8b bulk rows -n -c 2 -j 2 -t $((rows / txn_rows / 2)) -f "$f"
	fi
	record s8.loadavg_after "$(loadavg)"
	sink_stop
	cluster_stop
}

# ------------------------------------------------ 9: 1, 2, 4, 8 pipelines --
#
# (a) Catch-up: per round, a fresh workload of single-row transactions
#     behind 1+2+4+8 disabled pipelines on one publication; then each group
#     is enabled at once and timed until every pipeline of it acknowledged
#     the last commit (groups in alternating order over the rounds).
# (b) Source overhead: pgbench TPC-B-like (scale 10, 2 clients,
#     synchronous_commit off, -M prepared) in slices with 0, 1, 2, 4, 8
#     pipelines streaming (enabled and caught up before the slice), and
#     with one pipeline of the most destinations (issue #34), forward
#     and backward order in alternate rounds; TPS and the summed CPU of the
#     pipeline workers.  One more slice per round streams through
#     pg_recvlogical + wal2json v2 instead: target 1's CPU anchor at
#     pgbench's full rate.
# (c) The decode share of a worker's CPU: perf record (cpu-clock, DWARF call
#     graphs) of one separate catch-up, each sample attributed by
#     bench/decode_share.py to WAL decoding (what N pipelines could share),
#     replicant's encoding, its own transactions, HTTP, or the rest.
# (d) Issue #34 (scenario 12's catch-up part): in the same rounds, beside
#     the N pipelines, one pipeline of N destinations (the same sink, one
#     format), timed until its floor passed the last commit.
fanout_catchup_round() {
	local r=$1 counts=("${@:2}") total=0 k i end last_end t0 list
	for k in "${counts[@]}"; do total=$((total + k)); done
	for k in "${counts[@]}"; do
		pipelines_create_disabled "f${k}_" 1 "$k" fan_pub
		pipelines_create_disabled "d${k}_" 1 1 fan_pub
		for i in $(seq 2 "$k"); do
			psql_b -c "SELECT replicant.add_destination('d${k}_1', 'd$i', 'http://127.0.0.1:$SINK_PORT/',
				batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS)" >/dev/null
		done
	done
	if [ "$r" = 1 ] && [ "$S9_PERF" = 1 ]; then
		pipelines_create_disabled fperf 1 1 fan_pub
		pipelines_create_disabled dperf 1 1 fan_pub
		for i in $(seq 2 "$S9_MAX"); do
			psql_b -c "SELECT replicant.add_destination('dperf1', 'd$i', 'http://127.0.0.1:$SINK_PORT/',
				batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS)" >/dev/null
		done
	fi
	q "SELECT pg_create_logical_replication_slot('bench_td1', 'test_decoding')" >/dev/null
	log "s9: round $r: workload of $S9_TXNS transactions behind $total pipelines"
	PGB_OPTIONS="-c synchronous_commit=off" pgbench_b -n -c 2 -j 2 -t $((S9_TXNS / 2)) -f "$WORK/small_fan.sql" >/dev/null 2>&1 ||
		die "s9: workload failed"
	end=$(workload_end_lsn)
	last_end=$(last_commit_end "$end")
	q "CHECKPOINT" >/dev/null
	[ "$r" = 1 ] && record s9.wal_bytes "$(q "SELECT pg_wal_lsn_diff('$end', confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name = 'bench_td1'")"
	if [ $((r % 2)) = 0 ]; then
		mapfile -t counts < <(printf '%s\n' "${counts[@]}" | tac)
	fi
	for k in "${counts[@]}"; do
		list=$(seq -f "'f${k}_%g'" 1 "$k" | paste -sd,)
		t0=$(now)
		psql_b -c "SELECT replicant.enable_pipeline(p) FROM unnest(ARRAY[$list]) p" >/dev/null
		for i in $(seq "$k"); do
			pipeline_wait_acked "f${k}_$i" "$last_end" >/dev/null
		done
		record "s9.catchup_${k}_s.$r" "$(since "$t0")"
		t0=$(now)
		pipeline_catchup "d${k}_1" "$last_end" >/dev/null
		record "s9.dest_catchup_${k}_s.$r" "$(since "$t0")"
	done
	if [ "$r" = 1 ] && [ "$S9_PERF" = 1 ]; then
		decode_share_profile fperf1 "$last_end" share
		decode_share_profile dperf1 "$last_end" dshare
	fi
	psql_b -c "SELECT replicant.drop_pipeline(name) FROM replicant.pipelines" >/dev/null
	q "SELECT pg_drop_replication_slot('bench_td1')" >/dev/null
}

# decode_share_profile PIPELINE LAST_END KEY: the profile of (c), recorded as
# s9.KEY_*: "share" for a pipeline of one destination, "dshare" for one of
# S9_MAX destinations (d), whose top frames show where the fan-out's time goes.
decode_share_profile() {
	local pid
	log "s9: perf profile of a separate catch-up of $1 (where its CPU goes)"
	share_perf_start
	pid=$(enable_find_worker "$1")
	pipeline_wait_acked "$1" "$2" >/dev/null
	share_perf_stop "$pid" s9 "$3"
}

# share_perf_start: a machine-wide recording (cpu-clock, DWARF call graphs),
# started before the process of interest exists.
share_perf_start() {
	SHARE_PERF_DATA="$WORK/perf-share.data"
	perf record -e cpu-clock -F "${PERF_FREQ:-1999}" --call-graph dwarf,16384 -a -q -o "$SHARE_PERF_DATA" >/dev/null 2>&1 &
	SHARE_PERF_PID=$!
	sleep 0.5
}

# share_perf_stop PID SCENARIO KEY: stops the recording and attributes PID's
# samples by kind (bench/decode_share.py), recorded as SCENARIO.KEY_*; the
# deciding frames and top symbols go to bench/out/decode-KEY-SCENARIO-*.txt.
share_perf_stop() {
	local pid=$1 id=$2 key=$3 data=$SHARE_PERF_DATA
	kill -INT "$SHARE_PERF_PID" 2>/dev/null || true
	wait "$SHARE_PERF_PID" 2>/dev/null || true
	[ -n "$pid" ] || { log "$id: no pid for the $key profile"; rm -f "$data"; return 0; }
	perf script -i "$data" --pid "$pid" -F comm,pid,ip,sym,dso 2>/dev/null >"$WORK/perf-share.script" || true
	python3 "$BENCH_DIR/decode_share.py" "$WORK/perf-share.script" "$OUTDIR/decode-$key-$id-frames.txt" >"$WORK/decode_share.tsv" ||
		log "$id: $key: no profile"
	while IFS=$'\t' read -r k v; do
		[ -n "$k" ] && record "$id.${key}_$k" "$v"
	done <"$WORK/decode_share.tsv"
	perf report -i "$data" --pid "$pid" --no-children -g none --sort dso,sym --stdio 2>/dev/null |
		grep -v '^#' | grep -v '^$' | head -60 >"$OUTDIR/decode-$key-$id-top.txt" || true
	cp "$WORK/decode_share.tsv" "$OUTDIR/decode-$key-$id.tsv" 2>/dev/null || true
	perf_keep "$data" "decode-$key-$id"
	rm -f "$data" "$WORK/perf-share.script"
}

# fanout_overhead_slice K R: one slice of (b), pipelines o1..oK streaming,
# the others disabled; with K = dN, the one pipeline "od" of N destinations
# (issue #34) streams instead.  The workers' CPU is read once they have
# caught up with the slice, so that what they do after it ends is counted
# too.
fanout_overhead_slice() {
	local k=$1 r=$2 i out cpu0=0 cpu1=0 end pids=() on=()
	if [ "${k#d}" != "$k" ]; then
		on=(od)
	else
		for i in $(seq "$k"); do on+=("o$i"); done
	fi
	for i in $(seq "$S9_MAX") d; do
		if [[ " ${on[*]} " == *" o${i} "* ]]; then
			q "SELECT replicant.enable_pipeline('o$i')" >/dev/null
		else
			q "SELECT replicant.disable_pipeline('o$i')" >/dev/null
		fi
	done
	for i in $(seq "$S9_MAX") d; do
		if [[ " ${on[*]} " == *" o${i} "* ]]; then
			pipeline_wait_state "o$i" streaming
			wait_drained "o$i" "$(q "SELECT pg_current_wal_lsn()")" >/dev/null
			pids+=("$(worker_pid "o$i")")
		else
			pipeline_wait_state "o$i" disabled
		fi
	done
	for i in "${pids[@]}"; do cpu0=$(calc "$cpu0 + $(proc_cpu_s "$i")"); done
	out=$(PGB_OPTIONS="-c synchronous_commit=off" pgbench_b -n -M prepared -c 2 -j 2 -T "$S9_SECS" 2>&1) ||
		{ echo "$out" >&2; die "pgbench failed"; }
	end=$(q "SELECT pg_current_wal_insert_lsn()")
	for i in "${on[@]}"; do wait_drained "$i" "$end" >/dev/null; done
	for i in "${pids[@]}"; do cpu1=$(calc "$cpu1 + $(proc_cpu_s "$i")"); done
	record "s9.tps_${k}.$r" "$(pgbench_tps "$out")"
	record "s9.txns_${k}.$r" "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
	[ "$k" = 0 ] || record "s9.cpu_${k}_s.$r" "$(calc "$cpu1 - $cpu0")"
}

# fanout_overhead_w2j R: one slice of (b) with no pipeline streaming and
# pg_recvlogical + wal2json v2 (to /dev/null) as the consumer, on a slot
# made for the slice: target 1's anchor at pgbench's full rate, its CPU
# (walsender + pg_recvlogical) read once the walsender has sent all the
# slice's WAL.
fanout_overhead_w2j() {
	local r=$1 i out wspid rlpid cpu0 end
	for i in $(seq "$S9_MAX") d; do q "SELECT replicant.disable_pipeline('o$i')" >/dev/null; done
	for i in $(seq "$S9_MAX") d; do pipeline_wait_state "o$i" disabled; done
	q "SELECT pg_create_logical_replication_slot('bench_s9w', 'wal2json')" >/dev/null
	rm -f "$WORK/recvlogical.pid"
	as_pg bash -c "echo \$\$ >'$WORK/recvlogical.pid'; exec '$BINDIR/pg_recvlogical' -h '$SOCKDIR' \
		-p '$PGPORT' -d bench -S bench_s9w --start -o format-version=2 -o include-transaction=false \
		-F 0 -f /dev/null 2>>'$WORK/recvlogical.log'" &
	for _ in $(seq 200); do
		wspid=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_s9w'")
		[ -n "$wspid" ] && [ -s "$WORK/recvlogical.pid" ] && break
		sleep 0.05
	done
	[ -n "$wspid" ] || die "s9: pg_recvlogical did not connect"
	rlpid=$(cat "$WORK/recvlogical.pid")
	cpu0=$(calc "$(proc_cpu_s "$wspid") + $(proc_cpu_s "$rlpid")")
	out=$(PGB_OPTIONS="-c synchronous_commit=off" pgbench_b -n -M prepared -c 2 -j 2 -T "$S9_SECS" 2>&1) ||
		{ echo "$out" >&2; die "pgbench failed"; }
	end=$(q "SELECT pg_current_wal_insert_lsn()")
	psql_b -c "DO \$\$ BEGIN LOOP EXIT WHEN (SELECT sent_lsn >= '$end' FROM pg_stat_replication WHERE pid = $wspid); PERFORM pg_sleep(0.002); END LOOP; END \$\$"
	record "s9.cpu_w2j_s.$r" "$(calc "$(proc_cpu_s "$wspid") + $(proc_cpu_s "$rlpid") - $cpu0")"
	record "s9.tps_w2j.$r" "$(pgbench_tps "$out")"
	record "s9.txns_w2j.$r" "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
	kill -INT "$rlpid" 2>/dev/null || true
	for _ in $(seq 100); do
		[ -z "$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_s9w'")" ] && break
		sleep 0.05
	done
	q "SELECT pg_drop_replication_slot('bench_s9w')" >/dev/null
}

scenario_9() {
	local counts r k order
	IFS=, read -r -a counts <<<"$S9_COUNTS"
	S9_MAX=0
	for k in "${counts[@]}"; do [ "$k" -gt "$S9_MAX" ] && S9_MAX=$k; done
	log "== scenario 9: $S9_COUNTS pipelines on one publication ($ROUNDS rounds)"
	cluster_start s9
	sink_start
	record s9.counts "$S9_COUNTS"
	create_stream_table fan
	psql_b -c "CREATE PUBLICATION fan_pub FOR TABLE fan"
	small_insert_script fan >/dev/null
	bench_wait_setup
	record s9.loadavg_before "$(loadavg)"
	for r in $(seq "$ROUNDS"); do
		fanout_catchup_round "$r" "${counts[@]}"
	done

	log "s9: source overhead, pgbench scale 10 with 0, $S9_COUNTS pipelines and with wal2json"
	pgbench_b -i -q -s 10 >/dev/null 2>&1 || die "pgbench -i failed"
	# (pgbench_history only gets inserts; REPLICA IDENTITY FULL spares each
	# create_pipeline the warning about a table without one.)
	psql_b -c "ALTER TABLE pgbench_history REPLICA IDENTITY FULL" \
		-c "CREATE PUBLICATION pgbench_pub FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"
	pipelines_create_disabled o 1 "$S9_MAX" pgbench_pub
	pipeline_create od pgbench_pub
	pipeline_wait_state od streaming
	pipeline_disable od
	for i in $(seq 2 "$S9_MAX"); do
		psql_b -c "SELECT replicant.add_destination('od', 'd$i', 'http://127.0.0.1:$SINK_PORT/',
			batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS)" >/dev/null
	done
	PGB_OPTIONS="-c synchronous_commit=off" pgbench_b -n -M prepared -c 2 -j 2 -T 3 >/dev/null 2>&1
	psql_b -c "VACUUM ANALYZE" -c "CHECKPOINT"
	for r in $(seq "$ROUNDS"); do
		order="0 w2j ${counts[*]} d$S9_MAX"
		[ $((r % 2)) = 0 ] && order=$(tr ' ' '\n' <<<"$order" | tac | paste -sd' ')
		for k in $order; do
			if [ "$k" = w2j ]; then
				fanout_overhead_w2j "$r"
			else
				fanout_overhead_slice "$k" "$r"
			fi
		done
	done
	record s9.loadavg_after "$(loadavg)"
	sink_stop
	cluster_stop
}

# ------------------------------------------- 10: snapshot size and memory --
#
# Initial snapshot (1 worker) of the scenario-3 table at each size, beside
# COPY t TO '/dev/null', interleaved; the peak memory (VmHWM, the kernel's
# high-water mark of the resident set) of every replicant process of the
# snapshot, sampled from /proc/PID/status until each exits, and the largest
# private part (RssAnon) -- scenario 3's sampler.
snapshot_size_rounds() {
	local n=$1 r c secs inner hwm anon
	log "s10: $n rows"
	psql_b -c "DROP PUBLICATION IF EXISTS snap_pub; DROP TABLE IF EXISTS snap;"
	create_snap_table "$n"
	record "s10.$n.table_bytes" "$(q "SELECT pg_table_size('snap')")"
	q "SELECT count(*) FROM snap" >/dev/null
	for r in $(seq "$ROUNDS"); do
		for c in $(round_order "$r" rep copy); do
			case $c in
				rep)
					sink_get reset >/dev/null
					mem_sampler_reset
					read -r secs inner < <(snapshot_seconds "snap$r" "'snap_pub', 'http://127.0.0.1:$SINK_PORT/',
						snapshot => 'initial', snapshot_workers => 1,
						batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS") || true
					[ -n "$inner" ] || die "s10: snapshot did not finish"
					record "s10.$n.replicant_s.$r" "$secs"
					record "s10.$n.replicant_inner_s.$r" "$inner"
					read -r _ _ anon hwm < <(mem_sampler_read)
					record "s10.$n.vmhwm_kb.$r" "${hwm:-0}"
					record "s10.$n.rssanon_kb.$r" "${anon:-0}"
					record "s10.$n.rows_done" "$(q "SELECT sum(rows_done) FROM replicant.backfill_status WHERE pipeline = 'snap$r'")"
					psql_b -c "SELECT replicant.drop_pipeline('snap$r')" >/dev/null
					;;
				copy)
					record "s10.$n.copy_s.$r" "$(sql_seconds "COPY snap TO '/dev/null';")"
					;;
			esac
		done
	done
}

scenario_10() {
	local sizes n
	sizes=$S10_ROWS
	[ "$S10_BIG" = 1 ] && sizes="$sizes,$([ "$QUICK" = 1 ] && echo 1000000 || echo 20000000)"
	log "== scenario 10: snapshot time and worker memory at $sizes rows ($ROUNDS rounds)"
	cluster_start s10
	sink_start
	bench_wait_snapshot_setup
	record s10.sizes "$sizes"
	record s10.loadavg_before "$(loadavg)"
	IFS=, read -r -a sizes <<<"$sizes"
	mem_sampler_start
	for n in "${sizes[@]}"; do
		snapshot_size_rounds "$n"
	done
	mem_sampler_stop
	record s10.loadavg_after "$(loadavg)"
	sink_stop
	cluster_stop
}
