# bench/scenarios_resync.sh -- scenario 11, sourced by bench/run: healing a
# gap by resync vs by replaying the retained WAL (issue #33 item 6).
#
# One table of S11_ROWS rows (scenario 3's snap table: 6 columns, ~150 B a
# row) and two pipelines on it into the C sink:
#   catch-up  "c": made anew before each gap (a new slot at the current
#                  WAL), disabled for the gap (its slot retains the gap's
#                  WAL), then enabled: timed until the sink acknowledged
#                  the gap's last commit (the worker replays the WAL).
#   resync    "r": on_slot_loss => 'resync'; disabled, its slot dropped
#                  (as max_retained_wal or an operator would), the same
#                  gap, then enabled: the worker finds the slot gone and
#                  resyncs (new slot, every row read under its snapshot,
#                  snapshot_workers 2, the default), timed until the
#                  resync ended and the pipeline streams.
# Both times run from enable_pipeline (worker start included).
# The gap: G updates of two non-key columns (n, amount; the primary key
# and the text columns unchanged), in transactions of 1,000 rows, every
# row at most once per gap, spread over the whole table (id = 1 + (g *
# 999983 + offset) mod rows: a permutation, so a 1M gap on 1M rows updates
# every row once).  Before each gap the table is vacuumed and a CHECKPOINT
# runs (untimed), so each gap starts from the same table and writes its
# full-page images as a workload after a checkpoint would.
# Per gap: the gap's WAL, the WAL the catch-up slot retains at its end
# (replicant.status.retained_wal_bytes; the resync pipeline retains none,
# it has no slot), and for each method the seconds, and the bytes (request
# bodies) and requests the sink received.  Rounds interleave (c then r, r
# then c) over --rounds; every gap of S11_GAPS in every round.

# bench_gap(rows, changes, offset): the gap's workload, one commit per
# 1,000 rows; NOTICE "BENCHEND lsn" with an LSN after the last
# transaction's changes and before its commit record: the catch-up is
# done once the pipeline's checkpoint passes it.
resync_setup_sql() {
	psql_b <<'SQL'
CREATE OR REPLACE PROCEDURE bench_gap(p_rows bigint, p_changes bigint, p_offset bigint)
LANGUAGE plpgsql AS $$
DECLARE
	t bigint := 0;
	hi bigint;
BEGIN
	WHILE t < p_changes LOOP
		hi := least(t + 1000, p_changes);
		UPDATE snap SET n = n + 1, amount = amount + 1
		 WHERE id = ANY (ARRAY(SELECT 1 + (g * 999983 + p_offset) % p_rows
		                         FROM generate_series(t, hi - 1) g));
		t := hi;
		IF t >= p_changes THEN
			RAISE NOTICE 'BENCHEND %', pg_current_wal_insert_lsn();
		END IF;
		COMMIT;
	END LOOP;
END $$;

-- Enables a pipeline whose slot is gone and waits until its resync ended:
-- backfills newer than p_after exist and are done, no resync is recorded,
-- the worker streams.  NOTICE "BENCH worker_s total_s inner_s" (inner: the
-- first backfill's start to the last one's end, the worker's clock).
CREATE OR REPLACE PROCEDURE bench_resync_and_wait(p_name text, p_after bigint)
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	t_worker timestamptz;
	n_all int;
	n_done int;
	inner_s numeric;
	pending boolean;
	st text;
	pid int;
	i int := 0;
BEGIN
	PERFORM replicant.enable_pipeline(p_name);
	COMMIT;
	LOOP
		SELECT count(*), count(*) FILTER (WHERE b.state = 'done'),
		       round(extract(epoch FROM max(b.finished_at) - min(b.started_at))::numeric, 4),
		       bool_or(p.resync_reason IS NOT NULL)
		  INTO n_all, n_done, inner_s, pending
		  FROM replicant.pipelines p LEFT JOIN replicant.backfills b
		       ON b.pipeline_id = p.id AND b.id > p_after
		 WHERE p.name = p_name;
		i := i + 1;
		-- replicant.status costs more: only when done, or now and then
		IF t_worker IS NULL OR (n_all > 0 AND n_done = n_all AND NOT pending) OR i % 200 = 0 THEN
			SELECT state, worker_pid INTO st, pid FROM replicant.status WHERE pipeline = p_name;
			IF st = 'halted' THEN
				RAISE EXCEPTION 'pipeline % halted', p_name;
			END IF;
			IF t_worker IS NULL AND pid IS NOT NULL THEN t_worker := clock_timestamp(); END IF;
			EXIT WHEN n_all > 0 AND n_done = n_all AND NOT pending AND st = 'streaming';
		END IF;
		COMMIT;
		PERFORM pg_sleep(0.002);
	END LOOP;
	RAISE NOTICE 'BENCH % % %',
		round(extract(epoch FROM coalesce(t_worker, t0) - t0)::numeric, 4),
		round(extract(epoch FROM clock_timestamp() - t0)::numeric, 4), inner_s;
END $$;
SQL
}

# resync_gap G R OFFSET: one gap of G changes in round R, healed both ways.
resync_gap() {
	local g=$1 r=$2 off=$3 slot start out end m stats secs inner after
	# The previous gap's dead rows go; then the catch-up pipeline is made
	# anew (a new slot at the current WAL, streaming, then disabled), so
	# that what its slot retains at the gap's end is the gap's WAL, not
	# the VACUUM's behind a lagging restart_lsn.
	pipeline_disable r
	psql_b -c "SELECT replicant.drop_pipeline('c')" >/dev/null
	q "VACUUM snap" >/dev/null
	q "CHECKPOINT" >/dev/null
	pipeline_create c snap_pub
	pipeline_wait_state c streaming
	pipeline_disable c
	slot=$(q "SELECT slot_name FROM replicant.status WHERE pipeline = 'r'")
	q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
	start=$(q "SELECT pg_current_wal_insert_lsn()")
	out=$(psql_b -c "CALL bench_gap($S11_ROWS, $g, $off)" 2>&1) || { echo "$out" >&2; die "s11: gap workload failed"; }
	end=$(sed -n 's/.*BENCHEND \([0-9A-F/]*\).*/\1/p' <<<"$out")
	[ -n "$end" ] || { echo "$out" >&2; die "s11: no end LSN"; }
	record "s11.$g.wal_bytes.$r" "$(q "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$start')")"
	record "s11.$g.retained_wal_bytes.$r" "$(q "SELECT retained_wal_bytes FROM replicant.status WHERE pipeline = 'c'")"
	q "CHECKPOINT" >/dev/null
	for m in $(round_order "$r" c r); do
		sink_get reset >/dev/null
		case $m in
			c)
				read -r _ secs <<<"$(pipeline_catchup c "$end")"
				[ -n "$secs" ] || die "s11: catch-up did not finish"
				record "s11.$g.catchup_s.$r" "$secs"
				;;
			r)
				after=$(q "SELECT coalesce(max(id), 0) FROM replicant.backfills")
				read -r _ secs inner <<<"$(psql_b -c "CALL bench_resync_and_wait('r', $after)" 2>&1 | sed -n 's/.*BENCH //p')"
				[ -n "$secs" ] || die "s11: resync did not finish"
				record "s11.$g.resync_s.$r" "$secs"
				record "s11.$g.resync_read_s.$r" "$inner"
				record "s11.$g.resync_rows.$r" "$(q "SELECT sum(rows_done) FROM replicant.backfills WHERE id > $after")"
				;;
		esac
		stats=$(sink_get stats)
		record "s11.$g.${m}_sink_bytes.$r" "$(json_field "$stats" body_bytes)"
		record "s11.$g.${m}_sink_requests.$r" "$(json_field "$stats" requests)"
	done
}

scenario_11() {
	local gaps g r off=0
	log "== scenario 11: heal a gap by resync vs by catch-up ($S11_ROWS rows; gaps of $S11_GAPS changes; $ROUNDS rounds)"
	cluster_start s11
	sink_start
	create_snap_table "$S11_ROWS"
	record s11.rows "$S11_ROWS"
	record s11.gaps "$S11_GAPS"
	record s11.table_bytes "$(q "SELECT pg_table_size('snap')")"
	bench_wait_setup
	resync_setup_sql
	pipeline_create c snap_pub
	pipeline_create r snap_pub ", on_slot_loss => 'resync'"
	pipeline_wait_state r streaming
	record s11.loadavg_before "$(loadavg)"
	IFS=, read -r -a gaps <<<"$S11_GAPS"
	for r in $(seq "$ROUNDS"); do
		for g in "${gaps[@]}"; do
			log "s11: round $r, gap of $g changes"
			resync_gap "$g" "$r" "$off"
			off=$((off + g))
		done
	done
	record s11.loadavg_after "$(loadavg)"
	sink_stop
	cluster_stop
}
