# bench/lib.sh -- helpers shared by bench/run and bench/scenarios.sh.
# Sourced, not executed.  Expects BENCH_DIR, WORK, PGPORT, SINK_PORT, RESULTS
# to be set by bench/run.

BINDIR=${BINDIR:-/usr/lib/postgresql/15/bin}
PGDATA_DIR="$WORK/data"
SOCKDIR="$WORK"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# initdb refuses root: every server-side command runs as postgres.
as_pg() { runuser -u postgres -- env LANG=C.UTF-8 LC_ALL=C.UTF-8 "$@"; }

# psql against the bench cluster: -X (no psqlrc), stop on error, quiet.
psql_b() { as_pg "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCKDIR" -p "$PGPORT" -d bench "$@"; }
# One value, no decoration.
q() { psql_b -Atc "$1"; }

# High-resolution wall clock in seconds (float), and elapsed since $1.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# Float arithmetic: calc 'expr'
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }

# Records one measurement: key value.  bench/report.py turns them into the table.
record() {
	printf '%s\t%s\n' "$1" "$2" >>"$RESULTS"
	log "  $1 = $2"
}

# ---------------------------------------------------------------- cluster --

# Fresh throwaway cluster for each scenario: no state (bloat, WAL, slots)
# leaks from one scenario into the next.
# cluster_start ID: records which replicant.so this cluster loads (other
# engineers reinstall it; each scenario's values belong to one build).
cluster_start() {
	local id=${1:-}
	cluster_stop
	rm -rf "$PGDATA_DIR"
	mkdir -p "$WORK"
	chown postgres: "$WORK"
	as_pg "$BINDIR/initdb" -N -D "$PGDATA_DIR" -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
	local plugins=""
	# (grep without -q: with pipefail, -q's early exit would fail the pipe)
	if "$BINDIR/postgres" --describe-config 2>/dev/null | grep '^output_plugin_libraries' >/dev/null; then
		# 15.19+ loads only listed output plugins, even through the C API.
		plugins="output_plugin_libraries = 'pgoutput, test_decoding, wal2json, replicant'"
	fi
	cat >>"$PGDATA_DIR/postgresql.conf" <<CONF
# --- bench/lib.sh: benchmark settings (also listed in RESULTS.md) ---
port = $PGPORT
listen_addresses = ''
unix_socket_directories = '$SOCKDIR'
shared_preload_libraries = 'replicant'
wal_level = logical
$plugins
max_replication_slots = 40
max_wal_senders = 8
max_worker_processes = 32
replicant.max_pipelines = 32
shared_buffers = 1GB
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 30min
wal_buffers = 64MB
synchronous_commit = on
fsync = on
full_page_writes = on
autovacuum = off
logical_decoding_work_mem = 64MB
max_connections = 50
log_min_messages = warning
log_line_prefix = '%m [%p] %b '
${BENCH_EXTRA_CONF:-}
CONF
	# perf resolves replicant.so's symbols by build id: cache the library
	# the server is about to load, in case it is reinstalled meanwhile.
	[ "$PERF" = 1 ] && perf buildid-cache --add "$("$BINDIR/pg_config" --pkglibdir)/replicant.so" 2>/dev/null || true
	local so
	so="$("$BINDIR/pg_config" --pkglibdir)/replicant.so"
	[ -n "$id" ] && record "$id.replicant_so" "md5 $(md5sum "$so" | cut -c1-12), installed $(date -u -r "$so" +%H:%M:%SZ)"
	as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$WORK/server.log" -w -t 60 start >/dev/null ||
		{ tail -20 "$WORK/server.log" >&2; die "cluster did not start"; }
	as_pg "$BINDIR/psql" -X -q -h "$SOCKDIR" -p "$PGPORT" -d postgres -c "CREATE DATABASE bench" >/dev/null
	psql_b -c "CREATE EXTENSION replicant"
}

cluster_stop() {
	if [ -f "$PGDATA_DIR/postmaster.pid" ]; then
		as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 120 stop >/dev/null 2>&1 || true
	fi
}

# pgbench as postgres against the bench database; PGB_OPTIONS (e.g.
# "-c synchronous_commit=off") are the sessions' settings.
pgbench_b() { as_pg env PGOPTIONS="${PGB_OPTIONS:-}" "$BINDIR/pgbench" -h "$SOCKDIR" -p "$PGPORT" "$@" bench; }

# Per-round values: "median (min–max)" is computed by report.py; a round's
# order alternates A/B, B/A so that drift favours neither.
round_order() { # round_order R A B -> "A B" for odd R, "B A" for even
	if [ $(($1 % 2)) = 1 ]; then echo "$2 $3"; else echo "$3 $2"; fi
}

# ------------------------------------------------------------------- sink --

# sink_start [-l]: (re)starts the C sink on SINK_PORT; -l = latency mode.
sink_start() {
	sink_stop
	"$WORK/bin/sink" -p "$SINK_PORT" "$@" -o "$WORK/latency_samples.txt" 2>>"$WORK/sink.log" &
	SINK_PID=$!
	for _ in $(seq 50); do
		curl -sf "http://127.0.0.1:$SINK_PORT/stats" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "sink did not start"
}
sink_stop() {
	if [ -n "${SINK_PID:-}" ]; then
		kill "$SINK_PID" 2>/dev/null || true
		wait "$SINK_PID" 2>/dev/null || true
		SINK_PID=
	fi
}
sink_get() { curl -sf "http://127.0.0.1:$SINK_PORT/$1"; }
# json_field JSON key -> value (flat JSON objects from the sink only)
json_field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# --------------------------------------------------------------- replicant --

# pipeline_create NAME PUB [extra create_pipeline args]
pipeline_create() {
	psql_b -c "SELECT replicant.create_pipeline('$1', '$2', 'http://127.0.0.1:$SINK_PORT/',
		batch_max_bytes => $BATCH_BYTES, batch_max_transactions => $BATCH_TXNS ${3:-})" >/dev/null
}

# Waits until the pipeline's worker runs (state streaming) or is gone (disabled).
pipeline_wait_state() {
	local name=$1 want=$2
	for _ in $(seq 600); do
		local s
		s=$(q "SELECT state || ':' || coalesce(worker_pid::text, '') FROM replicant.status WHERE pipeline = '$name'")
		case "$want:$s" in
			streaming:streaming:?*) return 0 ;;
			disabled:disabled:) return 0 ;;
		esac
		case "$s" in halted:*) die "pipeline $name halted: $(q "SELECT last_error FROM replicant.status WHERE pipeline='$name'")" ;; esac
		sleep 0.05
	done
	die "pipeline $name did not reach state $want (now: $s)"
}

pipeline_disable() {
	psql_b -c "SELECT replicant.disable_pipeline('$1')" >/dev/null
	pipeline_wait_state "$1" disabled
}

worker_pid() { q "SELECT worker_pid FROM replicant.status WHERE pipeline = '$1'"; }
# enable_find_worker NAME: enables the pipeline and prints its worker's pid
# once the worker is up (nothing if none appeared within ~10 s).
enable_find_worker() {
	local pid=""
	psql_b -c "SELECT replicant.enable_pipeline('$1')" >/dev/null
	for _ in $(seq 2000); do
		pid=$(worker_pid "$1")
		[ -n "$pid" ] && break
		sleep 0.005
	done
	echo "$pid"
}

# CPU seconds (user + system) a process has used so far, from /proc.
proc_cpu_s() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}
# Seconds a process spent runnable but waiting for a CPU, over its life
# (/proc/PID/schedstat, nanoseconds): its time neither running nor asleep.
proc_runq_s() {
	awk '{ printf "%.3f", $2 / 1e9 }' "/proc/$1/schedstat" 2>/dev/null || echo 0
}

# Server-side waiter: one session, no connection per poll.  Polls every 2 ms
# for the worker, then waits in replicant.await_delivered() (100 ms at a
# time, committing between) until the pipeline's checkpoint has reached
# end_lsn, i.e. the sink acknowledged the transaction whose commit record
# ends there (checked in the checkpoint row after).  A waiter makes the
# worker commit its checkpoint with every acknowledgement, as any caller
# of await_delivered() does: the catch-up's end is not held back by up to a
# replicant.checkpoint_interval.  Prints "worker_s total_s": seconds from
# the call to the worker being up, and to acknowledged.
bench_wait_setup() {
	psql_b <<'SQL'
-- The CPU seconds (user + system) the calling backend has used so far.
CREATE OR REPLACE FUNCTION bench_cpu_s() RETURNS numeric LANGUAGE sql AS $$
	SELECT (split_part(f, ' ', 12)::numeric + split_part(f, ' ', 13)::numeric) / 100
	  FROM (SELECT split_part(pg_read_file('/proc/self/stat'), ') ', 2) AS f) s
$$;
CREATE OR REPLACE PROCEDURE bench_enable_and_wait(p_name text, p_end pg_lsn, p_enable boolean)
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	t_worker timestamptz;
	done_lsn pg_lsn;
	pid int;
BEGIN
	IF p_enable THEN
		PERFORM replicant.enable_pipeline(p_name);
		COMMIT;
	END IF;
	LOOP
		SELECT worker_pid INTO pid FROM replicant.status WHERE pipeline = p_name;
		EXIT WHEN pid IS NOT NULL;
		IF clock_timestamp() > t0 + interval '1 hour' THEN
			RAISE EXCEPTION 'no worker for pipeline % after an hour', p_name;
		END IF;
		COMMIT;
		PERFORM pg_sleep(0.002);
	END LOOP;
	t_worker := clock_timestamp();
	-- As a user waits for delivery: woken by the worker's acknowledgement.
	-- While someone waits, the worker commits its checkpoint with each
	-- acknowledgement (not at most every replicant.checkpoint_interval).
	-- Halted: it raises.
	LOOP
		EXIT WHEN replicant.await_delivered(p_name, p_end, 100);
		IF clock_timestamp() > t0 + interval '1 hour' THEN
			RAISE EXCEPTION 'pipeline % did not deliver up to % in an hour', p_name, p_end;
		END IF;
		COMMIT;
	END LOOP;
	-- the floor: the lowest checkpoint of its destinations (none: 0/0)
	SELECT min(coalesce(c.end_lsn, '0/0')) INTO done_lsn FROM replicant.destinations d
	  JOIN replicant.pipelines p ON p.id = d.pipeline_id
	  LEFT JOIN replicant.checkpoints c ON c.destination_id = d.id WHERE p.name = p_name;
	IF done_lsn < p_end THEN
		RAISE EXCEPTION 'pipeline % delivered up to %, but its checkpoint is at %', p_name, p_end, done_lsn;
	END IF;
	RAISE NOTICE 'BENCH % %',
		round(extract(epoch FROM coalesce(t_worker, t0) - t0)::numeric, 4),
		round(extract(epoch FROM clock_timestamp() - t0)::numeric, 4);
END $$;
SQL
}

# Initial snapshot done: every backfill row of the pipeline is done and the
# pipeline streams.  Prints the seconds from the first backfill start to
# the last backfill finish (the worker's own clock).
bench_wait_snapshot_setup() {
	psql_b <<'SQL'
CREATE OR REPLACE PROCEDURE bench_wait_snapshot(p_name text, p_t0 timestamptz DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
	n_all int;
	n_done int;
	st text;
	inner_s numeric;
	i int := 0;
BEGIN
	LOOP
		SELECT count(*), count(*) FILTER (WHERE b.state = 'done'),
		       round(extract(epoch FROM max(b.finished_at) - min(b.started_at))::numeric, 4)
		  INTO n_all, n_done, inner_s
		  FROM replicant.backfills b JOIN replicant.pipelines p ON p.id = b.pipeline_id
		 WHERE p.name = p_name;
		-- replicant.status costs ~0.5 ms a look, 9 % of a core at this
		-- rate, taken from the workers being timed: look at it only when
		-- the backfills are done or every 200th time (for a halt).
		i := i + 1;
		IF (n_all > 0 AND n_done = n_all) OR i % 200 = 0 THEN
			SELECT state INTO st FROM replicant.status WHERE pipeline = p_name;
			IF st = 'halted' THEN
				RAISE EXCEPTION 'pipeline % halted', p_name;
			END IF;
			EXIT WHEN n_all > 0 AND n_done = n_all AND st = 'streaming';
		END IF;
		COMMIT;
		PERFORM pg_sleep(0.005);
	END LOOP;
	IF p_t0 IS NULL THEN
		RAISE NOTICE 'BENCH %', inner_s;
	ELSE
		RAISE NOTICE 'BENCH % %', inner_s, round(extract(epoch FROM clock_timestamp() - p_t0)::numeric, 4);
	END IF;
END $$;
SQL
}

# snapshot_seconds NAME CREATE_PIPELINE_ARGS: creates the pipeline and waits
# for its snapshot in one session, timed by the server's clock from before
# the create_pipeline call, so that no psql start is in the time.  Prints
# "total inner": create_pipeline -> snapshot done and streaming, and the
# first backfill start -> the last one done.
snapshot_seconds() {
	local out
	out=$(psql_b 2>&1 <<SQL
SELECT clock_timestamp() AS bench_t0 \gset
SELECT replicant.create_pipeline('$1', $2);
CALL bench_wait_snapshot('$1', :'bench_t0');
SQL
	) || true
	sed -n 's/.*BENCH \([^ ]*\) \(.*\)/\2 \1/p' <<<"$out" | grep . || { echo "$out" >&2; return 1; }
}

# sql_seconds SQL...: runs SQL in one session and prints how long it took by
# the server's clock (no psql start in the time).
sql_seconds() {
	psql_b -At <<SQL | tail -n 1
SELECT clock_timestamp() AS bench_t0 \gset
$*
SELECT round(extract(epoch FROM clock_timestamp() - :'bench_t0')::numeric, 4);
SQL
}

# For a pipeline that streamed during a workload: the end of the last commit
# record, before END, of a transaction that wrote a table in schema public
# (so not replicant's own checkpoint writes), from a test_decoding slot
# created before the workload.  Untimed.
last_published_end() {
	# (grouped by xid::text: xid has no btree opclass, and a plain IN over
	# xid does not hash, which made this a nested loop)
	q "SELECT max(commit_end) FROM (
	     SELECT max(lsn) FILTER (WHERE data LIKE 'COMMIT%') AS commit_end,
	            bool_or(data LIKE 'table public.%') AS published
	       FROM pg_logical_slot_peek_changes('$1', '$2', NULL)
	      GROUP BY xid::text) t
	    WHERE published"
}

# drain_seconds NAME T_END LAST_END: waits until the pipeline's checkpoint
# reaches LAST_END, then prints how long after T_END (epoch seconds, taken
# when the workload ended) that last delivery happened: the worker's
# last_delivery_at (replicant.status, from shared memory), stamped right
# after the checkpoint commit.  (Not replicant.checkpoints.updated_at: that
# is now() in the worker, which does not advance -- see RESULTS.md.)
drain_seconds() {
	pipeline_wait_acked "$1" "$3" >/dev/null
	q "SELECT round((extract(epoch FROM last_delivery_at) - $2)::numeric, 3)
	     FROM replicant.status WHERE pipeline = '$1'"
}

# pipeline_catchup NAME END_LSN -> "worker_s total_s"
pipeline_catchup() {
	psql_b -c "CALL bench_enable_and_wait('$1', '$2', true)" 2>&1 | sed -n 's/.*BENCH //p'
}
# pipeline_wait_acked NAME END_LSN -> "worker_s total_s" (already enabled)
pipeline_wait_acked() {
	psql_b -c "CALL bench_enable_and_wait('$1', '$2', false)" 2>&1 | sed -n 's/.*BENCH //p'
}

# ----------------------------------------------------------------- anchors --

# Logical slots for the anchors, created before a workload so that each
# decodes exactly the WAL range replicant's slot does.
anchor_slots_create() {
	psql_b >/dev/null <<'SQL'
SELECT pg_create_logical_replication_slot('bench_td', 'test_decoding');
SELECT pg_create_logical_replication_slot('bench_w2j1', 'wal2json');
SELECT pg_create_logical_replication_slot('bench_w2j2', 'wal2json');
SQL
}
anchor_slots_drop() {
	psql_b -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'bench\_%'" >/dev/null
}

# After the workload: the end LSN, plus a little WAL past it (a
# non-transactional logical message), so that pg_recvlogical sees a record
# beyond --endpos and exits at once instead of waiting for a keepalive.
# The insert position, not pg_current_wal_lsn() (the write position): after
# a workload with synchronous_commit off the last commits may not be written
# yet.  Returns once that WAL is flushed (the WAL writer's job, within a few
# wal_writer_delay), because the SQL decoding functions read only flushed WAL.
workload_end_lsn() {
	local e
	e=$(q "SELECT pg_current_wal_insert_lsn()")
	q "SELECT pg_logical_emit_message(false, 'bench', 'end')" >/dev/null
	psql_b -c "DO \$\$ BEGIN WHILE pg_current_wal_flush_lsn() < '$e' LOOP PERFORM pg_sleep(0.01); END LOOP; END \$\$" >/dev/null
	echo "$e"
}

# Decode-only limit: test_decoding through the SQL function, output counted
# and thrown away in the server.  max(lsn) is the end of the last commit
# record in the range (test_decoding reports txn->end_lsn on COMMIT rows):
# replicant has acknowledged everything once its checkpoint reaches it.
# Prints "seconds rows last_end_lsn".
anchor_decode_only() {
	local end=$1 t0 out
	t0=$(now)
	out=$(q "SELECT count(*) || ' ' || max(lsn) FROM pg_logical_slot_peek_changes('bench_td', '$end', NULL)")
	echo "$(since "$t0") $out"
}

# pg_recvlogical + wal2json to /dev/null over [slot start, end].  Prints seconds.
anchor_recvlogical() {
	local slot=$1 end=$2 fmt=$3 t0
	t0=$(now)
	as_pg "$BINDIR/pg_recvlogical" -h "$SOCKDIR" -p "$PGPORT" -d bench -S "$slot" --start \
		--endpos="$end" --no-loop -f /dev/null -o "format-version=$fmt" ||
		die "pg_recvlogical ($slot) failed"
	since "$t0"
}

# ------------------------------------------------------------------- perf --

# Profiles.  perf records the whole machine (-a) so that recording can start
# before the process of interest exists (a pipeline worker starts on
# enable); perf_stop reports only PERF_FILTER_PID when set.  perf's build-id
# cache keeps a copy of replicant.so, so symbols resolve even when someone
# reinstalls the extension meanwhile.
# Build ids from the kernel's mmap events (--buildid-mmap), not read from
# the files when recording ends: a replicant.so replaced meanwhile would
# otherwise get the new file's id and lose its symbols.
perf_buildid_opt() {
	if perf record --buildid-mmap -q -o /dev/null -- true >/dev/null 2>&1; then
		echo --buildid-mmap
	fi
}

# perf_keep DATA NAME: with PERF_KEEP=PREFIX, keeps a copy of the recording
# as PREFIX-NAME.data, for perf report/script by hand.
perf_keep() {
	if [ -n "${PERF_KEEP:-}" ]; then
		cp "$1" "$PERF_KEEP-$2.data"
		log "  perf data kept: $PERF_KEEP-$2.data"
	fi
}

perf_start_system() {
	PERF_PID=
	PERF_FILTER_PID=
	[ "$PERF" = 1 ] || return 0
	# shellcheck disable=SC2046
	perf record $(perf_buildid_opt) -q -F "${PERF_FREQ:-1999}" ${PERF_CALL_GRAPH:--g} -a -o "$WORK/perf-$1.data" >/dev/null 2>&1 &
	PERF_PID=$!
	PERF_NAME=$1
	sleep 0.3
}

# wake_trace_start PID: records PID's syscalls that mark the steps from a
# wake-up to its first send (bench/wake_to_send.py) until wake_trace_stop.
wake_trace_start() {
	perf record -q -e syscalls:sys_exit_epoll_wait,syscalls:sys_enter_pread64,syscalls:sys_enter_rt_sigprocmask,syscalls:sys_enter_poll,syscalls:sys_enter_sendto \
		-p "$1" -o "$WORK/wake.data" >/dev/null 2>&1 &
	WAKE_PID=$!
	sleep 0.3
}

# wake_trace_stop PREFIX: records each step's median as PREFIX.<step>.
wake_trace_stop() {
	local name value
	kill -INT "$WAKE_PID" 2>/dev/null || true
	wait "$WAKE_PID" 2>/dev/null || true
	while read -r name value; do
		record "$1.$name" "$value"
	done < <(perf script -i "$WORK/wake.data" -F time,event 2>/dev/null | python3 "$BENCH_DIR/wake_to_send.py")
	rm -f "$WORK/wake.data"
}

# perf_start PID NAME: samples one running process until perf_stop.
perf_start() {
	PERF_PID=
	PERF_FILTER_PID=
	[ "$PERF" = 1 ] || return 0
	# shellcheck disable=SC2046
	perf record $(perf_buildid_opt) -q -F "${PERF_FREQ:-1999}" ${PERF_CALL_GRAPH:--g} -p "$1" -o "$WORK/perf-$2.data" >/dev/null 2>&1 &
	PERF_PID=$!
	PERF_NAME=$2
	sleep 0.3
}

perf_stop() {
	[ -n "${PERF_PID:-}" ] || return 0
	kill -INT "$PERF_PID" 2>/dev/null || true
	wait "$PERF_PID" 2>/dev/null || true
	PERF_PID=
	mkdir -p "$OUTDIR"
	local data="$WORK/perf-$PERF_NAME.data" filter=()
	[ -n "${PERF_FILTER_PID:-}" ] && filter=(--pid "$PERF_FILTER_PID" --percentage relative)
	# Flat profile (self time) and inclusive time (call
	# graphs from frame pointers: the server's are partial, but the big
	# blocks show): what to optimise.
	perf report -i "$data" "${filter[@]}" --no-children --sort symbol \
		--percent-limit 0.5 --stdio -g none 2>/dev/null | grep -v '^$' >"$OUTDIR/perf-$PERF_NAME.txt" || true
	perf report -i "$data" "${filter[@]}" --children --sort symbol \
		--percent-limit 2 --stdio -g none 2>/dev/null | grep -v '^$' >"$OUTDIR/perf-$PERF_NAME-children.txt" || true
	# Whole machine by process name, unfiltered: worker vs sink vs the rest.
	perf report -i "$data" --no-children --sort comm \
		--stdio -g none 2>/dev/null | grep -v '^$' >"$OUTDIR/perf-$PERF_NAME-comm.txt" || true
	perf_keep "$data" "$PERF_NAME"
	rm -f "$data"
	log "  perf profile: $OUTDIR/perf-$PERF_NAME.txt"
}

# create_snap_table N: the snapshot scenarios' table of N rows, frozen,
# analyzed and checkpointed, and its publication snap_pub.
create_snap_table() {
	local n=$1
	psql_b <<SQL
CREATE TABLE snap (id bigint PRIMARY KEY, n int, s text, ts timestamptz, amount numeric(12,2), doc jsonb);
INSERT INTO snap
SELECT g, (g * 7) % 100000, 'name ' || md5(g::text),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
       (g % 100000) / 100.0,
       jsonb_build_object('k', g, 'tag', 'tag' || (g % 100), 'ok', g % 2 = 0)
  FROM generate_series(1, $n) g;
VACUUM (FREEZE, ANALYZE) snap;
CHECKPOINT;
CREATE PUBLICATION snap_pub FOR TABLE snap;
SQL
}
