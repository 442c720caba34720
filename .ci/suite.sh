#!/usr/bin/env bash
# .ci/suite.sh -- build replicant against one PostgreSQL and run all of its
# tests (pg_regress, then TAP).  .ci/run calls it for the host's server and
# test/pg-matrix.sh inside each version's chroot.
#
#   bash .ci/suite.sh PG_CONFIG [TAP-FILE...]
#
# Runs as root: it copies the repository into a fresh directory owned by the
# "postgres" OS user (initdb refuses root, and the checkout may sit where
# postgres cannot enter), builds there with warnings as errors, installs the
# extension and runs `make installcheck`: pg_regress, then the TAP files
# that run on this server's major version (test/tap-files.sh reads each
# file's "# versions:" line), several at a time (prove -j), slowest first
# as far as an earlier run measured them.  Given TAP files, it runs only
# those (and no pg_regress).  It prints the time of the build, of pg_regress
# and of the TAP run, and the slowest TAP files; when a file fails, its logs.
# It ends with the line "N passed, M failed", counting pg_regress tests and
# TAP test files, and exits non-zero on any failure.
#
# Environment:
#   REGRESS_TIMEOUT, TAP_TIMEOUT  seconds allowed per suite (300, 1200)
#   CI_KEEP=1                     keep the build directory even on success
#   SUITE_TAP=0                   run pg_regress only (no TAP files)
#   SUITE_CFLAGS                  more compiler flags for the extension, e.g.
#                                 -DUSE_ASSERT_CHECKING (its Asserts, against a
#                                 server built without them, as pgvector's CI)
#                                 or -DREPLICANT_MUTANTS (test/README.md,
#                                 "Differential test")
#   SUITE_REGRESS=0               run no pg_regress
#   SUITE_ALL_TAP=1               every TAP file, whatever its "# versions:"
#   SUITE_JOBS=N                  TAP files run at once (default 3)
#   SUITE_REPEAT=N, SUITE_REPEAT_FILES="test/t/x.pl ..."
#                                 after the TAP run, run those files (the
#                                 ones of them that run on this version) N
#                                 more times, stopping at the first failure
#   SUITE_TAP_TIMES=FILE          where the TAP files' times are kept between
#                                 runs, to start the slowest first (default
#                                 /var/tmp/replicant-tap-times/MAJOR; empty:
#                                 none, files run in name order)
#   PG_TEST_PORT_DIR              the port reservations that concurrent
#                                 suites share (default /dev/shm/replicant-
#                                 portlock-UID, UID being postgres's)
set -euo pipefail

WARNINGS="-Wall -Wextra -Werror -Wno-unused-parameter -Wno-sign-compare"
WARNINGS+=" -Wno-missing-field-initializers ${SUITE_CFLAGS:-}"

say() { printf '\n=== %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ] || [ $# -lt 1 ]; then
	echo "usage (as root): bash .ci/suite.sh PG_CONFIG [TAP-FILE...]" >&2
	exit 2
fi
PG_CONFIG=$1
shift
tap_files=("$@")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Any failure before the tests (build, install) ends here.
tests_ran=0
trap 'rc=$?; [ $rc = 0 ] || [ $tests_ran = 1 ] ||
	echo ".ci/suite.sh: FAILED before any test ran (exit status $rc, see above)"' EXIT

suite_start=$(date +%s)
major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
say "$("$PG_CONFIG" --version), $(runuser -u postgres -- python3 --version)," \
	"$(gcc --version | head -n1)${SUITE_CFLAGS:+, extension built with $SUITE_CFLAGS}"

# ---- 2. a private copy, owned by postgres ------------------------------------
work=$(mktemp -d /tmp/replicant-ci.XXXXXX)
cp -a "$repo/." "$work/"
chown -R postgres: "$work"
cd "$work"
say "building in $work"

# Runs a command as postgres, in $work, with a UTF-8 locale so that initdb
# creates UTF8 databases whatever the caller's locale is.
as_postgres() {
	runuser -u postgres -- env LANG=C.UTF-8 LC_ALL=C.UTF-8 "$@"
}

# ---- 3. build (as postgres) and install (as root) ----------------------------
# with_llvm=no: servers built with LLVM would have every file compiled a
# second time, by clang into JIT bitcode, which no test uses (a third of
# the build's CPU, three builds at once in .ci/run).
as_postgres make -s clean PG_CONFIG="$PG_CONFIG" with_llvm=no
as_postgres make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" PG_CFLAGS="$WARNINGS ${SUITE_CFLAGS:-}" with_llvm=no
make install PG_CONFIG="$PG_CONFIG" with_llvm=no
chown -R postgres: "$work"
# An assert build must really check: its Asserts call ExceptionalCondition,
# which a build without USE_ASSERT_CHECKING never references.
if [[ " ${SUITE_CFLAGS:-} " == *" -DUSE_ASSERT_CHECKING "* ]] &&
	[[ " $(nm -D --undefined-only replicant.so) " != *" ExceptionalCondition"* ]]; then
	echo "error: built with -DUSE_ASSERT_CHECKING, but replicant.so has no Assert" >&2
	exit 1
fi
build_seconds=$(($(date +%s) - suite_start))

# ---- 4. tests ----------------------------------------------------------------
# pg_regress and TAP run as separate invocations of `make installcheck`, so
# that the TAP tests still run when a regression test fails.  NO_INSTALLCHECK=
# is set because --temp-instance gives installcheck its own server.
status=0
timings=()

# The TAP files: the ones given, or the ones for this major version.
explicit=0
if [ ${#tap_files[@]} -gt 0 ]; then
	explicit=1
elif [ "${SUITE_TAP:-1}" != 0 ]; then
	if [ "${SUITE_ALL_TAP:-0}" = 1 ]; then
		tap_files=(test/t/*.pl)
	else
		list=$(bash test/tap-files.sh "$major")
		[ -z "$list" ] || mapfile -t tap_files <<<"$list"
	fi
fi
repeat_files=()
if [ "${SUITE_REPEAT:-0}" -gt 0 ] && [ -n "${SUITE_REPEAT_FILES:-}" ]; then
	# shellcheck disable=SC2086 # a list of paths without blanks
	list=$(bash test/tap-files.sh "$major" $SUITE_REPEAT_FILES)
	[ -z "$list" ] || mapfile -t repeat_files <<<"$list"
fi

# TAP files of concurrent suites (the versions .ci/run runs at once) share
# their port reservations (PostgreSQL::Test::Cluster's get_free_port, which
# ClickHouse.pm uses too).  Reservations name a process, which only the same
# user can see: one directory per uid of "postgres" (the chroots' differ).
if [ -z "${PG_TEST_PORT_DIR:-}" ]; then
	PG_TEST_PORT_DIR=/dev/shm/replicant-portlock-$(id -u postgres)
fi
export PG_TEST_PORT_DIR
mkdir -p "$PG_TEST_PORT_DIR"
chown postgres: "$PG_TEST_PORT_DIR"

# What an earlier run measured: "file milliseconds" lines.
times_file=${SUITE_TAP_TIMES-/var/tmp/replicant-tap-times/$major}

# Orders TAP files slowest first, by the times of earlier runs; files never
# measured go first (they may be slow), in name order, like ties.
slowest_first() {
	if [ -z "$times_file" ] || [ ! -s "$times_file" ]; then
		printf '%s\n' "$@"
		return
	fi
	printf '%s\n' "$@" | awk 'NR == FNR { ms[$1] = $2; next }
		{ print ($0 in ms ? ms[$0] : 1e12), $0 }' "$times_file" - |
		sort -k1,1nr -k2,2 -s | cut -d' ' -f2-
}

# run_suite NAME TIMEOUT MAKE-VARIABLES...: output to the terminal and NAME.out
run_suite() {
	local name=$1 limit=$2 rc
	shift 2
	say "$name"
	{
		rc=0
		timeout -k 30 "$limit" runuser -u postgres -- \
			env LANG=C.UTF-8 LC_ALL=C.UTF-8 \
			make installcheck PG_CONFIG="$PG_CONFIG" NO_INSTALLCHECK= "$@" 2>&1 ||
			rc=$?
		echo $rc >"$work/$name.rc"
	} | tee "$work/$name.out"
	rc=$(cat "$work/$name.rc")
	[ "$rc" = 124 ] && echo "$name: timed out after $limit s"
	[ "$rc" = 0 ]
}

# A timeout leaves test servers running (pg_ctl detaches them): stop the
# ones whose data directory is in this build directory, and no others.
stop_leftover_servers() {
	find "$work" -name postmaster.pid 2>/dev/null |
		while read -r pidfile; do
			runuser -u postgres -- "$("$PG_CONFIG" --bindir)/pg_ctl" \
				-D "$(dirname "$pidfile")" stop -m immediate >/dev/null 2>&1 || true
		done
}

# ---- 4a. pg_regress --------------------------------------------------------------
tests_ran=1
regress_ok=1
: >regress.out
if [ $explicit = 0 ] && [ "${SUITE_REGRESS:-1}" != 0 ]; then
	start=$(date +%s)
	run_suite regress "${REGRESS_TIMEOUT:-300}" TAP_TESTS= || regress_ok=0
	timings+=("pg_regress: $(($(date +%s) - start)) s")
fi
# pg_regress (15) prints "test name ... ok" / "... FAILED" per test; 16 and
# later print TAP ("ok 1 - name" / "not ok 1 - name").  Count both forms.
regress_passed=$(grep -cE '\.\.\. ok|^ok [0-9]' regress.out || true)
regress_failed=$(grep -cE '\.\.\. FAILED|^not ok [0-9]' regress.out || true)
if [ $regress_ok = 0 ]; then
	status=1
	[ "$regress_failed" -gt 0 ] || regress_failed=1 # pg_regress itself failed
	stop_leftover_servers
	if [ -s regression.diffs ]; then
		say "regression.diffs"
		cat regression.diffs
	fi
	# pg_regress's temporary server logs to log/ (not tmp_check/log);
	# initdb's log only matters when the server never started.
	for log in log/postmaster.log log/initdb.log; do
		[ -f "$log" ] || continue
		say "tail of $log"
		tail -n 100 "$log"
		break
	done
fi

# ---- 4b. TAP -------------------------------------------------------------------
tap_passed=0
tap_failed=0

# prove prints, with --timer, "[hh:mm:ss] file .. ok  N ms (...)" (or
# "skipped: ...") for each file that passed, and once finished a "Test
# Summary Report" naming each file that failed as "file (Wstat: W Tests: N
# Failed: F)" followed by indented details.  Prints the failed files.
failed_tap_files() {
	awk '
	/^Test Summary Report/ { report = 1; next }
	report && /^[^ ].* \(Wstat: / {
		file = $1
		if ($0 !~ /Wstat: 0 / || $0 !~ /Failed: 0\)/) failed[file] = 1
	}
	report && /^  (Parse errors|Non-zero)/ { failed[file] = 1 }
	/^Files=/ { report = 0 }
	END { for (f in failed) print f }' "$1"
}
passed_tap_pattern='^(\[[0-9:]+\] )?[^ ]+\.pl \.+ (ok|skipped)'

# Prints the logs of the failed files of a TAP run (or, when prove did not
# finish, of every file that did not pass): tmp_check/log/regress_log_<test>,
# then <test>_<node>.log and <test>_<sink>.log.
print_tap_failures() {
	local out=$1 failed=$2 file test log
	shift 2
	for file in "$@"; do
		if [ -n "$failed" ]; then
			grep -qxF "$file" <<<"$failed" || continue
		else
			grep -qE "^(\[[0-9:]+\] )?$file \.+ (ok|skipped)" "$out" && continue
		fi
		test=$(basename "$file" .pl)
		# First, in a few lines, what failed and where a test died: a CI
		# page that shows only part of the long tails still shows these.
		log="tmp_check/log/regress_log_$test"
		if [ -f "$log" ]; then
			say "failures in $log"
			grep -nE '^(\[[^]]*\]\([^)]*\) )?(not ok|# +(Failed|got|expected))| at \S+ line [0-9]+' "$log" | tail -n 40 || true
		fi
		for log in "tmp_check/log/regress_log_$test" tmp_check/log/"$test"_*.log; do
			[ -f "$log" ] || continue
			say "tail of $log"
			tail -n 100 "$log"
		done
	done
}

# tap_round NAME FILE...: one prove run of the files; counts them into
# tap_passed and tap_failed, prints the logs of those that failed.  Returns
# non-zero if any failed.
tap_round() {
	local name=$1 ok=1 start passed failed failed_files ordered
	shift
	start=$(date +%s)
	mapfile -t ordered < <(slowest_first "$@")
	run_suite "$name" "${TAP_TIMEOUT:-1200}" REGRESS= ISOLATION= \
		PROVE_TESTS="${ordered[*]}" PROVE_FLAGS="--timer -j${SUITE_JOBS:-3}" || ok=0
	timings+=("$name (${#ordered[@]} files, -j${SUITE_JOBS:-3}): $(($(date +%s) - start)) s")
	passed=$(grep -cE "$passed_tap_pattern" "$name.out" || true)
	failed_files=$(failed_tap_files "$name.out")
	failed=$(printf '%s' "$failed_files" | grep -c . || true)
	if [ $ok = 0 ] && [ "$failed" -eq 0 ]; then
		failed=1 # prove did not run or did not finish (timeout)
	fi
	tap_passed=$((tap_passed + passed))
	tap_failed=$((tap_failed + failed))
	# "file ms" of each file that passed, for the next run's order and the
	# list of the slowest below.
	sed -nE 's/^\[[0-9:]+\] ([^ ]+\.pl) \.+ ok +([0-9]+) ms.*/\1 \2/p' "$name.out" >"$name.times"
	if [ $ok = 0 ]; then
		stop_leftover_servers
		print_tap_failures "$name.out" "$failed_files" "${ordered[@]}"
		return 1
	fi
	return 0
}

tap_ok=1
: >tap.out
: >tap.times
if [ "${SUITE_TAP:-1}" != 0 ] && [ ${#tap_files[@]} -gt 0 ]; then
	tap_round tap "${tap_files[@]}" || tap_ok=0
	if [ $tap_ok = 1 ] && [ $explicit = 0 ] && [ -n "$times_file" ]; then
		mkdir -p "$(dirname "$times_file")"
		cp tap.times "$times_file" || true
	fi
fi
# Reruns, to catch a flaky file: each round runs every file once.
if [ $tap_ok = 1 ] && [ ${#repeat_files[@]} -gt 0 ]; then
	for round in $(seq 1 "$SUITE_REPEAT"); do
		tap_round "repeat-$round" "${repeat_files[@]}" || { tap_ok=0; break; }
	done
fi
[ $tap_ok = 1 ] || status=1
[ $status = 0 ] || { echo; echo "build directory kept for inspection: $work"; }

# ---- 5. report -----------------------------------------------------------------
say "summary"
if [ -s regress.out ]; then
	grep -E '^[# ]*(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests (passed|failed))' \
		regress.out || echo "pg_regress: no summary (see above)"
fi
for out in tap.out repeat-*.out; do
	[ -s "$out" ] || continue
	grep -E '^(Files=|Result:)' "$out" | sed "s/^/${out%.out}: /" ||
		echo "${out%.out}: prove: no summary (see above)"
done
if [ -s tap.times ] || compgen -G 'repeat-*.times' >/dev/null; then
	echo "slowest TAP files (ms):"
	cat tap.times repeat-*.times 2>/dev/null | sort -k2,2nr | head -n 10 | sed 's/^/  /' || true
fi
echo "build and install: $build_seconds s"
printf '%s\n' "${timings[@]}"
echo "PostgreSQL $major in all: $(($(date +%s) - suite_start)) s"

if [ $status = 0 ] && [ "${CI_KEEP:-0}" != 1 ]; then
	cd /
	rm -rf "$work"
fi
echo "$((regress_passed + tap_passed)) passed, $((regress_failed + tap_failed)) failed"
exit $status
