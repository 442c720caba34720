#!/usr/bin/env bash
# soak.sh -- randomized crash trials on one cluster under a write workload,
# or (-o) the differential test's fresh seeds for a given time.
#
#   test/soak.sh [-n TRIALS] [-s SEED] [-f FAULTS] [-i MS] [-d DIR]
#   test/soak.sh -o SECONDS [-s SEED] [-S SECONDS] [-d DIR]
#
#   -n TRIALS  number of trials (default 20; a trial takes about 6 s)
#   -s SEED    seed for the random faults and moments (default: random)
#   -f FAULTS  comma list of the faults to pick from (default: all six)
#   -i MS      replicant.checkpoint_interval (default 0, which makes "at most
#              one batch re-delivered per crash" a checked figure; above 0
#              only loss and effect duplicates are)
#   -d DIR     where the cluster, logs and TAP output go
#              (default: ${TMPDIR:-/tmp}/replicant-soak-$USER)
#   -o SECONDS oracle mode: run test/t/080_oracle.pl on fresh random seeds
#              (from SEED on, with -s) until SECONDS have passed, then
#              shorten the first failing history for up to -S SECONDS
#              (default 1200); prints one line
#                oracle: seeds=N failures=F first failing seed=S ...
#              and exits non-zero if any seed failed.  Histories (and the
#              shortened one) are kept in DIR/oracle; each failure's replay
#              command is in DIR/soak.log.
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

usage() { sed -n '4,28p' "$0" >&2; exit 2; }
trials=20 seed= faults= interval=0 dir=${TMPDIR:-/tmp}/replicant-soak-$(id -un)
oracle= shrink=1200
while getopts "n:s:f:i:d:o:S:h" opt; do
	case $opt in
		n) trials=$OPTARG ;;
		s) seed=$OPTARG ;;
		f) faults=$OPTARG ;;
		i) interval=$OPTARG ;;
		d) dir=$OPTARG ;;
		o) oracle=$OPTARG ;;
		S) shrink=$OPTARG ;;
		*) usage ;;
	esac
done
[[ -z $oracle || $oracle =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: -o needs seconds" >&2; exit 2; }
[[ $shrink =~ ^[0-9]+$ ]] || { echo "soak.sh: -S needs seconds" >&2; exit 2; }
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
# PostgreSQL 16 and later's test modules read these, 15's TESTDIR.
export TESTDATADIR="$dir/tmp_check" TESTLOGDIR="$dir/tmp_check/log"
if [ -n "$oracle" ]; then
	# The oracle's seeds start at -s SEED (one after the other), else anywhere.
	TESTDIR=$dir PATH="$bindir:$PATH" PG_REGRESS="$pgxs/test/regress/pg_regress" \
		ORACLE_SOAK_SECONDS=$oracle ORACLE_FIRST_SEED=$seed ORACLE_SHRINK=$shrink \
		ORACLE_OUT="$dir/oracle" ORACLE_SUMMARY="$dir/summary" \
		perl -I "$pgxs/test/perl" -I "$here" "$here/t/080_oracle.pl" >"$dir/soak.log" 2>&1 || rc=$?
	if [ -s "$dir/summary" ]; then
		cat "$dir/summary"
		grep -q ' failures=0 ' "$dir/summary" || rc=1
	else
		echo "oracle: aborted before the summary (exit status $rc), see $dir/soak.log"
		[ $rc -ne 0 ] || rc=1
	fi
	exit $rc
fi
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
