#!/usr/bin/env bash
# soak.sh -- randomized crash trials on one cluster under a write workload.
#
#   test/soak.sh [-n TRIALS] [-s SEED] [-f FAULTS] [-i MS] [-d DIR]
#
#   -n TRIALS  number of trials (default 20; a trial takes about 6 s)
#   -s SEED    seed for the random faults and moments (default: random)
#   -f FAULTS  comma list of the faults to pick from (default: all six)
#   -i MS      replicant.checkpoint_interval (default 0, which makes "at most
#              one batch re-delivered per crash" a checked figure; above 0
#              only loss and effect duplicates are)
#   -d DIR     where the cluster, logs and TAP output go
#              (default: ${TMPDIR:-/tmp}/replicant-soak-$USER)
#
# Each trial crashes replicant once, at a random moment, in one of six ways
# (fault points decode, after_send, after_ack, after_checkpoint; kill -9 of
# the worker; pg_ctl stop -m immediate + start), and then checks at the
# reference sink: no committed transaction lost, none applied twice, at most
# one batch re-delivered per crash (with -i 0).  See test/soak.pl.
#
# Prints one line, for example
#   soak: trials=200 loss=0 effect_dup=0 raw_redelivered_batches=143 max_per_crash=1 ...
# and exits non-zero if any figure is violated (or a trial could not crash or
# recover).  Details: DIR/soak.log (TAP), DIR/tmp_check/log/ (server, sink).
#
# Runs against the installed extension (make install), as a user initdb
# accepts (not root), with pg_config's PostgreSQL on PATH or in PG_CONFIG.
set -euo pipefail

usage() { sed -n '3,14p' "$0" >&2; exit 2; }
trials=20 seed= faults= interval=0 dir=${TMPDIR:-/tmp}/replicant-soak-$(id -un)
while getopts "n:s:f:i:d:h" opt; do
	case $opt in
		n) trials=$OPTARG ;;
		s) seed=$OPTARG ;;
		f) faults=$OPTARG ;;
		i) interval=$OPTARG ;;
		d) dir=$OPTARG ;;
		*) usage ;;
	esac
done
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: -n needs a positive number" >&2; exit 2; }
[[ -z $seed || $seed =~ ^[0-9]+$ ]] || { echo "soak.sh: -s needs a number" >&2; exit 2; }
[[ $interval =~ ^[0-9]+$ ]] || { echo "soak.sh: -i needs milliseconds" >&2; exit 2; }
[ "$(id -u)" -ne 0 ] || { echo "soak.sh: initdb refuses root; run as an ordinary user" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pg_config=${PG_CONFIG:-pg_config}
bindir=$("$pg_config" --bindir)
pgxs=$(dirname "$("$pg_config" --pgxs)")/..    # .../lib/pgxs/src
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/tmp_check" "$dir/summary"

rc=0
TESTDIR=$dir PATH="$bindir:$PATH" PG_REGRESS="$pgxs/test/regress/pg_regress" \
	SOAK_TRIALS=$trials SOAK_SEED=$seed SOAK_FAULTS=$faults SOAK_CHECKPOINT_INTERVAL=$interval SOAK_SUMMARY="$dir/summary" \
	perl -I "$pgxs/test/perl" -I "$here" "$here/soak.pl" >"$dir/soak.log" 2>&1 || rc=$?
if [ -s "$dir/summary" ]; then
	cat "$dir/summary"
else
	echo "soak: trials=$trials aborted before the summary (exit status $rc), see $dir/soak.log"
	[ $rc -ne 0 ] || rc=1
fi
exit $rc
