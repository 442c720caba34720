#!/usr/bin/env bash
# Proves that replicant-alerts.test.yml can fail: breaks the rules of
# replicant-alerts.yml one at a time (a threshold, a "for:", a window, a
# state) and runs the promtool unit tests on each mutant.  A mutant the
# tests still pass is a broken rule they would not catch: exits 1.
# Run by `make check-alerts`.
set -eu
PROMTOOL=${PROMTOOL:-promtool}
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src"/replicant-alerts.yml "$src"/replicant-alerts.test.yml "$work"/
cd "$work"
survived=0
mut() {
	python3 - "$src/replicant-alerts.yml" "$1" "$2" <<'PY'
import sys
s = open(sys.argv[1]).read()
if sys.argv[2] not in s:
    sys.exit('mutants.sh: not in replicant-alerts.yml: ' + sys.argv[2])
open('replicant-alerts.yml', 'w').write(s.replace(sys.argv[2], sys.argv[3], 1))
PY
	if "$PROMTOOL" test rules replicant-alerts.test.yml >/dev/null 2>&1; then
		echo "SURVIVED: $3"
		survived=$((survived + 1))
	else
		echo "killed:   $3"
	fi
}
mut $'replicant_state == 4\n        for: 1m' $'replicant_state == 4\n        for: 0m' "Halted: for 1m -> 0m"
mut 'expr: replicant_state == 4' 'expr: replicant_state >= 4' "Halted: == 4 -> >= 4 (pages on disabled/standby)"
mut 'expr: replicant_disabled_by_sink == 1' 'expr: replicant_disabled_by_sink == 0' "DisabledBySink: == 1 -> == 0"
mut 'expr: replicant_disabled_by_sink == 1' 'expr: replicant_disabled_by_sink >= 0' "DisabledBySink: == 1 -> >= 0"
mut 'expr: replicant_state == 3' 'expr: replicant_state >= 3' "Retrying: == 3 -> >= 3"
mut $'replicant_state == 3\n        for: 5m' $'replicant_state == 3\n        for: 1m' "Retrying: for 5m -> 1m"
mut $'replicant_lag_seconds > 300\n        for: 5m' $'replicant_lag_seconds > 300\n        for: 0m' "LagHigh: for 5m -> 0m"
mut 'replicant_lag_seconds > 300' 'replicant_lag_seconds > 3' "LagHigh: > 300 -> > 3"
mut 'replicant_lag_seconds > 300' 'replicant_lag_seconds > 600' "LagHigh: > 300 -> > 600"
mut 'replicant_last_progress_timestamp_seconds > 300' 'replicant_last_progress_timestamp_seconds > 240' "Stalled: > 300 -> > 240"
mut 'replicant_last_progress_timestamp_seconds > 300' 'replicant_last_progress_timestamp_seconds > 400' "Stalled: > 300 -> > 400"
mut 'and on(pipeline) replicant_state == 2' 'and on(pipeline) replicant_state >= 0' "Stalled: any state"
mut 'increase(replicant_worker_starts_total[15m]) > 3' 'increase(replicant_worker_starts_total[15m]) > 8' "WorkerRestarting: > 3 -> > 8"
mut 'increase(replicant_worker_starts_total[15m]) > 3' 'increase(replicant_worker_starts_total[15m]) > 2' "WorkerRestarting: > 3 -> > 2"
mut $'> 0.8\n          or' $'> 0.5\n          or' "WalBudget (max_retained_wal): 0.8 -> 0.5"
mut $'> 0.8\n          or' $'> 0.88\n          or' "WalBudget (max_retained_wal): 0.8 -> 0.88"
mut '(replicant_retained_wal_bytes + replicant_safe_wal_size_bytes) > 0.8' '(replicant_retained_wal_bytes + replicant_safe_wal_size_bytes) > 0.5' "WalBudget (server): 0.8 -> 0.5"
mut '(replicant_retained_wal_bytes + replicant_safe_wal_size_bytes) > 0.8' '(replicant_retained_wal_bytes + replicant_safe_wal_size_bytes) > 0.88' "WalBudget (server): 0.8 -> 0.88"
mut $'safe_wal_size_bytes) > 0.8\n        for: 1m' $'safe_wal_size_bytes) > 0.8\n        for: 0m' "WalBudget: for 1m -> 0m"
mut 'changes(replicant_backfill_rows_done[10m]) == 0' 'changes(replicant_backfill_rows_done[5m]) == 0' "BackfillStalled: window 10m -> 5m"
mut 'and replicant_backfill_rows_done offset 10m' 'and replicant_backfill_rows_done' "BackfillStalled: no age condition"
mut 'expr: replicant_state == 9' 'expr: replicant_state >= 3' "DestinationBehind: == 9 -> >= 3 (pages on retrying)"
mut $'replicant_state == 9\n        for: 15m' $'replicant_state == 9\n        for: 5m' "DestinationBehind: for 15m -> 5m"
mut 'increase(replicant_rewinds_total[1h]) > 3' 'increase(replicant_rewinds_total[1h]) > 2' "Rewinding: > 3 -> > 2"
mut 'increase(replicant_rewinds_total[1h]) > 3' 'increase(replicant_rewinds_total[1h]) > 5' "Rewinding: > 3 -> > 5"
if [ "$survived" -ne 0 ]; then
	echo "mutants.sh: $survived broken rule(s) pass replicant-alerts.test.yml" >&2
	exit 1
fi
