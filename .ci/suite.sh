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
# extension and runs `make installcheck`.  Given TAP files, it runs only
# those (and no pg_regress).  It ends with the line "N passed, M failed",
# counting pg_regress tests and TAP test files, and exits non-zero on any
# failure.
#
# Environment:
#   REGRESS_TIMEOUT, TAP_TIMEOUT  seconds allowed per suite (300, 1200)
#   CI_KEEP=1                     keep the build directory even on success
#   SUITE_TAP=0                   run pg_regress only (no TAP files)
#   SUITE_CFLAGS                  more compiler flags for the extension, e.g.
#                                 -DUSE_ASSERT_CHECKING (its Asserts, against a
#                                 server built without them, as pgvector's CI)
set -euo pipefail

WARNINGS="-Wall -Wextra -Werror -Wno-unused-parameter -Wno-sign-compare"
WARNINGS+=" -Wno-missing-field-initializers"

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
as_postgres make -s clean PG_CONFIG="$PG_CONFIG"
as_postgres make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" PG_CFLAGS="$WARNINGS ${SUITE_CFLAGS:-}"
make install PG_CONFIG="$PG_CONFIG"
chown -R postgres: "$work"

# ---- 4. tests ----------------------------------------------------------------
# pg_regress and TAP run as two invocations of `make installcheck`, so that
# the TAP tests still run when a regression test fails.  NO_INSTALLCHECK= is
# set because --temp-instance gives installcheck its own server.
status=0

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

tests_ran=1
regress_ok=1
if [ ${#tap_files[@]} -eq 0 ]; then
	run_suite regress "${REGRESS_TIMEOUT:-300}" TAP_TESTS= || regress_ok=0
else
	: >regress.out
fi
tap_ok=1
if [ "${SUITE_TAP:-1}" = 0 ]; then
	: >tap.out
elif [ ${#tap_files[@]} -eq 0 ]; then
	run_suite tap "${TAP_TIMEOUT:-1200}" REGRESS= ISOLATION= || tap_ok=0
else
	run_suite tap "${TAP_TIMEOUT:-1200}" REGRESS= ISOLATION= \
		PROVE_TESTS="${tap_files[*]}" || tap_ok=0
fi

# ---- 5. report -----------------------------------------------------------------
# pg_regress (15) prints "test name ... ok" / "... FAILED" per test; 16 and
# later print TAP ("ok 1 - name" / "not ok 1 - name").  Count both forms.
regress_passed=$(grep -cE '\.\.\. ok|^ok [0-9]' regress.out || true)
regress_failed=$(grep -cE '\.\.\. FAILED|^not ok [0-9]' regress.out || true)
if [ $regress_ok = 0 ] && [ "$regress_failed" -eq 0 ]; then
	regress_failed=1 # pg_regress itself failed (e.g. the server did not start)
fi

# prove prints "file .. ok" (or "skipped: ...") for each file that passed,
# and, once finished, a "Test Summary Report" naming each file that failed
# as "file (Wstat: W Tests: N Failed: F)" followed by indented details.
tap_passed=$(grep -cE '^[^ ]+\.pl \.+ (ok|skipped)' tap.out || true)
tap_failed_files=$(awk '
	/^Test Summary Report/ { report = 1; next }
	report && /^[^ ].* \(Wstat: / {
		file = $1
		if ($0 !~ /Wstat: 0 / || $0 !~ /Failed: 0\)/) failed[file] = 1
	}
	report && /^  (Parse errors|Non-zero)/ { failed[file] = 1 }
	/^Files=/ { report = 0 }
	END { for (f in failed) print f }' tap.out)
tap_failed=$(printf '%s' "$tap_failed_files" | grep -c . || true)
if [ $tap_ok = 0 ] && [ "$tap_failed" -eq 0 ]; then
	tap_failed=1 # prove did not run or did not finish (timeout)
fi

# A timeout leaves test servers running (pg_ctl detaches them): stop the
# ones whose data directory is in this build directory, and no others.
find "$work" -name postmaster.pid 2>/dev/null |
	while read -r pidfile; do
		runuser -u postgres -- "$("$PG_CONFIG" --bindir)/pg_ctl" \
			-D "$(dirname "$pidfile")" stop -m immediate >/dev/null 2>&1 || true
	done

if [ $regress_ok = 0 ] || [ $tap_ok = 0 ]; then
	status=1
	if [ -s regression.diffs ]; then
		say "regression.diffs"
		cat regression.diffs
	fi
	# pg_regress's temporary server logs to log/ (not tmp_check/log);
	# initdb's log only matters when the server never started.
	if [ $regress_ok = 0 ]; then
		for log in log/postmaster.log log/initdb.log; do
			[ -f "$log" ] || continue
			say "tail of $log"
			tail -n 100 "$log"
			break
		done
	fi
	# The TAP logs of the failed test files (or, when prove did not finish,
	# of every file that did not pass): tmp_check/log/regress_log_<test>,
	# then <test>_<node>.log and <test>_<sink>.log.
	for file in test/t/*.pl; do
		if [ -n "$tap_failed_files" ]; then
			grep -qxF "$file" <<<"$tap_failed_files" || continue
		else
			grep -qE "^$file \.+ (ok|skipped)" tap.out && continue
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
	echo
	echo "build directory kept for inspection: $work"
fi

say "summary"
grep -E '^[# ]*(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests (passed|failed))' \
	regress.out || echo "pg_regress: no summary (see above)"
grep -E '^(Files=|Result:)' tap.out || echo "prove: no summary (see above)"

if [ $status = 0 ] && [ "${CI_KEEP:-0}" != 1 ]; then
	cd /
	rm -rf "$work"
fi
echo "$((regress_passed + tap_passed)) passed, $((regress_failed + tap_failed)) failed"
exit $status
