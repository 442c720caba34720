#!/usr/bin/env bash
# test/pg-matrix.sh -- build replicant against another PostgreSQL major
# version and run its whole test suite there, in a Debian chroot.
#
#   sudo bash test/pg-matrix.sh VERSION [TAP-FILE...]
#   sudo bash test/pg-matrix.sh --demo VERSION     # test/demo.sh there
#
# VERSION is 17 (Debian 13 "trixie") or 18 (Debian testing "forky").  The
# chroot is made with debootstrap on the first run and kept under
# $REPLICANT_MATRIX_CACHE/<suite> (default /var/cache/replicant-matrix), so a
# second run reuses it and starts in seconds.  The repository is copied in
# and .ci/suite.sh runs there: build with warnings as errors, install,
# `make installcheck` (pg_regress, then every TAP file, or only the TAP files
# given), and the final line "N passed, M failed"; the SUITE_* variables
# of .ci/suite.sh (SUITE_CFLAGS: .ci/run builds 18's extension with
# -DUSE_ASSERT_CHECKING) and the tests' REPLICANT_* and ORACLE_* ones are
# passed on.  The copy includes
# test/js/node_modules (`npm ci --prefix test/js`, as .ci/run does): the
# chroot has Node.js but no npm.  If the version cannot be
# installed, built or started, the run says so and fails: it never skips.
set -euo pipefail

demo=0
if [ "${1:-}" = --demo ]; then
	demo=1
	shift
fi
if [ "$(id -u)" -ne 0 ] || [ $# -lt 1 ]; then
	echo "usage (as root): bash test/pg-matrix.sh [--demo] 17|18 [TAP-FILE...]" >&2
	exit 2
fi
version=$1
shift
case $version in
17) suite=trixie ;;
18) suite=forky ;;
*)
	echo "test/pg-matrix.sh: no chroot is known for PostgreSQL $version (17 and 18 are)" >&2
	exit 2
	;;
esac
MIRROR=${REPLICANT_MATRIX_MIRROR:-http://deb.debian.org/debian}
cache=${REPLICANT_MATRIX_CACHE:-/var/cache/replicant-matrix}
root=$cache/$suite
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# forky's Release file has been seen past its Valid-Until date.
APT=(apt-get -q -o Acquire::Check-Valid-Until=false)
PACKAGES=("postgresql-$version" "postgresql-server-dev-$version"
	"postgresql-contrib-$version" libcurl4-openssl-dev libipc-run-perl python3
	make gcc openssl ca-certificates nodejs gdb nats-server libnats-dev)

fail() {
	echo "test/pg-matrix.sh: PostgreSQL $version ($suite) is unusable: $*" >&2
	exit 1
}

mkdir -p "$cache"
# One run per chroot at a time: the mounts and the installed replicant.so
# are shared.
exec 9>"$cache/$suite.lock"
flock 9

mounted() { grep -qF " $root/" /proc/mounts; }
unmount_all() {
	local m p pids=()
	# Whatever a test left running in the chroot would keep /dev busy.
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && pids+=("${p#/proc/}")
	done
	if [ ${#pids[@]} -gt 0 ]; then
		echo "test/pg-matrix.sh: stopping processes left in the chroot: ${pids[*]}" >&2
		kill "${pids[@]}" 2>/dev/null || true
		sleep 1
		kill -9 "${pids[@]}" 2>/dev/null || true
	fi
	for m in dev/shm dev proc; do
		if mountpoint -q "$root/$m" 2>/dev/null; then
			umount "$root/$m" || umount -l "$root/$m"
		fi
	done
}
trap unmount_all EXIT

# ---- 1. the chroot (made once, then reused) ----------------------------------
if [ ! -e "$root/.replicant-ready" ]; then
	if ! command -v debootstrap >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
	fi
	# A chroot without the marker is a half-made one: start again, but never
	# remove a directory something is still mounted under.
	unmount_all
	mounted && fail "something is still mounted under $root"
	rm -rf "$root"
	script=/usr/share/debootstrap/scripts/$suite
	[ -f "$script" ] || script=/usr/share/debootstrap/scripts/sid
	echo "=== creating the $suite chroot in $root (once)"
	debootstrap --variant=minbase "$suite" "$root" "$MIRROR" "$script" ||
		fail "debootstrap $suite failed"
	echo "deb $MIRROR $suite main" >"$root/etc/apt/sources.list"
	mount -t proc proc "$root/proc"
	chroot "$root" "${APT[@]}" update || fail "apt-get update failed in the chroot"
	DEBIAN_FRONTEND=noninteractive chroot "$root" "${APT[@]}" install -y \
		--no-install-recommends "${PACKAGES[@]}" ||
		fail "Debian $suite does not offer ${PACKAGES[*]}"
	umount "$root/proc"
	touch "$root/.replicant-ready"
fi

# ---- 2. mounts a server needs ------------------------------------------------
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
mountpoint -q "$root/dev/shm" || mount --bind /dev/shm "$root/dev/shm"

# Packages added to PACKAGES after the chroot was made.  apt's simulation
# knows virtual packages (postgresql-contrib-17 is one), dpkg-query does not.
if ! plan=$(chroot "$root" "${APT[@]}" install -s --no-install-recommends \
	"${PACKAGES[@]}" 2>&1) || grep -q '^Inst ' <<<"$plan"; then
	echo "=== installing what is missing of ${PACKAGES[*]} in the $suite chroot"
	chroot "$root" "${APT[@]}" update || fail "apt-get update failed in the chroot"
	DEBIAN_FRONTEND=noninteractive chroot "$root" "${APT[@]}" install -y \
		--no-install-recommends "${PACKAGES[@]}" ||
		fail "Debian $suite does not offer ${PACKAGES[*]}"
fi

pg_config=/usr/lib/postgresql/$version/bin/pg_config
chroot "$root" test -x "$pg_config" || fail "$pg_config is missing in the chroot"
got=$(chroot "$root" "$pg_config" --version) || fail "$pg_config does not run"
case $got in
"PostgreSQL $version".*) ;;
*) fail "the chroot has $got" ;;
esac
chroot "$root" id postgres >/dev/null || fail "the chroot has no postgres user"

# ---- 3. ClickHouse ---------------------------------------------------------
# Debian 13 and later have no clickhouse-server package: the host's (Debian
# 12's, which .ci/run installs) runs in the chroot with its own libraries and
# loader, copied to /opt/replicant-clickhouse (once per host binary).
clickhouse_env=()
host_ch=/usr/sbin/clickhouse-server
if [ -x "$host_ch" ]; then
	ch=$root/opt/replicant-clickhouse
	if ! cmp -s "$host_ch" "$ch/clickhouse-server"; then
		rm -rf "$ch"
		mkdir -p "$ch/lib"
		ldd "$host_ch" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
			xargs -r cp -L -t "$ch/lib" || fail "could not copy the libraries of $host_ch"
		cat >"$ch/run" <<-'EOF'
			#!/bin/sh
			d=/opt/replicant-clickhouse
			exec $d/lib/ld-linux-x86-64.so.2 --library-path $d/lib $d/clickhouse-server "$@"
		EOF
		chmod 755 "$ch/run"
		cp "$host_ch" "$ch/clickhouse-server" # last: it marks the copy complete
	fi
	clickhouse_env=(CLICKHOUSE_SERVER=/opt/replicant-clickhouse/run)
else
	clickhouse_env=(REPLICANT_NO_CLICKHOUSE="Debian $suite has no clickhouse-server package, and the host none to lend")
fi

# ---- 3b. Prometheus ----------------------------------------------------------
# test/t/090_prometheus.pl runs the host's prometheus and
# prometheus-postgres-exporter (Debian 12's, which .ci/run installs): Go
# binaries that need only libc, which the chroot's newer one serves.  They
# are copied to /opt/replicant-prometheus (again when the host's change).
prometheus_env=()
copied=1
ph=$root/opt/replicant-prometheus
mkdir -p "$ph"
for binary in prometheus prometheus-postgres-exporter; do
	if [ -x "/usr/bin/$binary" ]; then
		cmp -s "/usr/bin/$binary" "$ph/$binary" || cp "/usr/bin/$binary" "$ph/$binary" ||
			fail "could not copy /usr/bin/$binary"
	else
		copied=0
	fi
done
if [ $copied = 1 ]; then
	prometheus_env=(PROMETHEUS="/opt/replicant-prometheus/prometheus"
		POSTGRES_EXPORTER="/opt/replicant-prometheus/prometheus-postgres-exporter")
else
	prometheus_env=(REPLICANT_NO_PROMETHEUS="the host has no prometheus and prometheus-postgres-exporter to lend")
fi

# ---- 4. the suite, on a copy of the tree ------------------------------------
rm -rf "$root/build"
mkdir -p "$root/build"
cp -a "$repo/." "$root/build/replicant"
rm -rf "$root/build/replicant/.git"
echo "=== PostgreSQL $version in $root"
# .ci/suite.sh's settings (SUITE_JOBS, SUITE_REPEAT, ...) and the tests'
# (REPLICANT_SEED, ORACLE_SEED, ...), whatever they are.
mapfile -t suite_env < <(env | grep -E '^(SUITE|REPLICANT|ORACLE)_[A-Z0-9_]+=' |
	grep -vE '^REPLICANT_(MATRIX_|NO_CLICKHOUSE=|NO_PROMETHEUS=)' || true)
if [ $demo = 1 ]; then
	chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		bash /build/replicant/test/demo.sh "$version"
	exit
fi
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	REGRESS_TIMEOUT="${REGRESS_TIMEOUT:-300}" TAP_TIMEOUT="${TAP_TIMEOUT:-1200}" \
	CI_KEEP="${CI_KEEP:-0}" CI="${CI:-}" "${clickhouse_env[@]}" "${prometheus_env[@]}" "${suite_env[@]}" \
	bash /build/replicant/.ci/suite.sh "$pg_config" "$@" || {
	rc=$?
	echo "(PostgreSQL $version: the paths above are inside $root)"
	exit $rc
}
