#!/usr/bin/env bash
# .ci/valgrind.sh -- the pg_regress suite once against a server that runs
# under valgrind memcheck; .ci/run calls it for the host's PostgreSQL.
#
#   bash .ci/valgrind.sh PG_CONFIG
#
# Runs as root, like .ci/suite.sh: builds and installs replicant from a copy
# owned by postgres, then runs `make installcheck` (pg_regress only: under
# valgrind the TAP clusters are too slow for CI) with --bindir pointing at a
# copy of the server's bindir whose postgres is a wrapper that starts the
# real one under `valgrind --leak-check=no --trace-children=yes`.  initdb is
# not wrapped.  Every process the postmaster forks (backends, the launcher,
# pipeline workers) is checked; each writes valgrind/<pid>.log.  Fails when
# pg_regress fails or when any log holds a valgrind error report; the
# reports are printed.  Known harmless reports are suppressed by
# .ci/valgrind.supp.  Ends with "valgrind: ok" or "valgrind: FAILED".
set -euo pipefail

if [ "$(id -u)" -ne 0 ] || [ $# -ne 1 ]; then
	echo "usage (as root): bash .ci/valgrind.sh PG_CONFIG" >&2
	exit 2
fi
PG_CONFIG=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bindir=$("$PG_CONFIG" --bindir)

work=$(mktemp -d /tmp/replicant-valgrind.XXXXXX)
cp -a "$repo/." "$work/"
cd "$work"
rm -rf tmp_regress results log regression.diffs regression.out
# The smallest WAL buffers: backends then write WAL pages themselves, as they
# do when the WAL writer falls behind on a loaded machine, so the reports
# (and suppressions) are the same whatever the load.
printf 'wal_buffers = 32kB\n' >>test/regress.conf
mkdir -p vgbin valgrind
for f in "$bindir"/*; do
	ln -s "$f" "vgbin/$(basename "$f")"
done
rm vgbin/postgres
cat >vgbin/postgres <<WRAPPER
#!/bin/sh
exec valgrind --quiet --leak-check=no --trace-children=yes \\
	--suppressions=$work/.ci/valgrind.supp \\
	--error-markers=VALGRINDERROR-BEGIN,VALGRINDERROR-END \\
	--log-file=$work/valgrind/%p.log \\
	"$bindir/postgres" "\$@"
WRAPPER
chmod 755 vgbin/postgres
chown -R postgres: "$work"

as_postgres() {
	runuser -u postgres -- env LANG=C.UTF-8 LC_ALL=C.UTF-8 "$@"
}
as_postgres make -s clean PG_CONFIG="$PG_CONFIG"
as_postgres make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG"
make -s install PG_CONFIG="$PG_CONFIG"

status=0
start=$(date +%s)
# PGCTLTIMEOUT: pg_regress's wait for the server to start (60 s by default).
timeout -k 30 "${VALGRIND_TIMEOUT:-1500}" runuser -u postgres -- \
	env LANG=C.UTF-8 LC_ALL=C.UTF-8 PGCTLTIMEOUT=600 \
	make installcheck PG_CONFIG="$PG_CONFIG" NO_INSTALLCHECK= TAP_TESTS= \
	EXTRA_REGRESS_OPTS="--bindir=$work/vgbin" 2>&1 | tee regress.out ||
	status=1
grep -q '^# All [0-9]* tests passed\|All [0-9]* tests passed' regress.out || status=1
[ -s regression.diffs ] && cat regression.diffs
echo "pg_regress under valgrind: $(($(date +%s) - start)) s"

# A timeout leaves the server running: stop it.
find "$work" -name postmaster.pid 2>/dev/null | while read -r pidfile; do
	runuser -u postgres -- "$bindir/pg_ctl" -D "$(dirname "$pidfile")" \
		stop -m immediate >/dev/null 2>&1 || true
done

reports=$(cat valgrind/*.log 2>/dev/null | grep -c '^==[0-9]*== VALGRINDERROR-BEGIN' || true)
if [ "$reports" != 0 ]; then
	echo "valgrind: $reports error report(s):"
	for log in valgrind/*.log; do
		grep -q VALGRINDERROR-BEGIN "$log" || continue
		echo "--- $log"
		sed -n '/VALGRINDERROR-BEGIN/,/VALGRINDERROR-END/p' "$log"
	done
	status=1
fi
echo "valgrind: $(ls valgrind | wc -l) processes checked"
if [ $status = 0 ]; then
	cd /
	rm -rf "$work"
	echo "valgrind: ok"
else
	echo "valgrind: FAILED (kept $work)"
fi
exit $status
