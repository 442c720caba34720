#!/usr/bin/env bash
# test/demo.sh -- see replicant stream changes to an HTTP sink, from scratch.
#
#   sudo bash test/demo.sh [VERSION]     # or PG_VERSION=VERSION; default 15
#
# On PostgreSQL 17 or 18, unless that version is installed here, it runs in
# the Debian chroot of test/pg-matrix.sh (made on the first use).
#
# Installs what is missing (PostgreSQL, headers, libcurl, python3), builds
# and installs replicant, starts a throwaway cluster and the reference sink
# on loopback, creates a table, a publication and a pipeline, writes a few
# rows, and prints what the sink received and replicant.status.  Everything
# it starts is stopped and removed at the end.
set -euo pipefail

PORT=54329
SINK_PORT=18089
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ "$(id -u)" -ne 0 ]; then
	echo "test/demo.sh: must run as root: sudo bash test/demo.sh" >&2
	exit 2
fi

version=${1:-${PG_VERSION:-15}}
if [ "$version" != 15 ] && [ ! -x "/usr/lib/postgresql/$version/bin/pg_config" ]; then
	exec bash "$repo/test/pg-matrix.sh" --demo "$version"
fi

packages=("postgresql-$version" "postgresql-server-dev-$version" libcurl4-openssl-dev python3 make gcc)
missing=0
for pkg in "${packages[@]}"; do
	dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q ' installed$' || missing=1
done
if [ $missing = 1 ]; then
	echo "== installing ${packages[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
fi
bindir=/usr/lib/postgresql/$version/bin

# Build from a copy the postgres user can read, then install.
work=$(mktemp -d /tmp/replicant-demo.XXXXXX)
cp -a "$repo/." "$work/src"
chown -R postgres: "$work"
as_postgres() { runuser -u postgres -- env LANG=C.UTF-8 LC_ALL=C.UTF-8 "$@"; }
echo "== building replicant"
as_postgres make -s -C "$work/src" PG_CONFIG=$bindir/pg_config >/dev/null
make -s -C "$work/src" install PG_CONFIG=$bindir/pg_config >/dev/null

cleanup() {
	as_postgres $bindir/pg_ctl -D "$work/data" -m fast stop >/dev/null 2>&1 || true
	pkill -f "$work/sink.db" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== starting a throwaway cluster on port $PORT"
as_postgres $bindir/initdb -D "$work/data" -A trust >/dev/null
plugins=""
if as_postgres $bindir/postgres --describe-config | grep '^output_plugin_libraries' >/dev/null; then
	plugins="output_plugin_libraries = 'pgoutput, test_decoding, replicant'"
fi
cat >>"$work/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'replicant'
wal_level = logical
$plugins
CONF
as_postgres $bindir/pg_ctl -D "$work/data" -l "$work/server.log" -w start >/dev/null

echo "== starting the reference sink on http://127.0.0.1:$SINK_PORT/ingest"
as_postgres python3 "$work/src/test/sink/replicant_sink.py" serve --port $SINK_PORT \
	--db "$work/sink.db" --keep-bodies >/dev/null 2>"$work/sink.log" &
sleep 1

psql_demo() { as_postgres $bindir/psql -X -h "$work" -p $PORT -d postgres "$@"; }

echo "== creating a table, a publication and a pipeline, then writing"
psql_demo -e -q -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION replicant;
CREATE TABLE orders (id bigint PRIMARY KEY, customer text, total numeric(10,2), tags text[]);
CREATE PUBLICATION orders_pub FOR TABLE orders;
SELECT replicant.create_pipeline('orders', 'orders_pub', 'http://127.0.0.1:$SINK_PORT/ingest');
INSERT INTO orders VALUES (1, 'ada', 9.50, '{new}'), (2, 'grace', 120.00, '{}');
UPDATE orders SET total = 10.00, tags = '{new,paid}' WHERE id = 1;
DELETE FROM orders WHERE id = 2;
SQL

# Wait (at most 10 s) until the pipeline has delivered the three transactions.
for _ in $(seq 100); do
	done_txns=$(psql_demo -Atq -c "SELECT transactions_delivered FROM replicant.status")
	[ "${done_txns:-0}" -ge 3 ] && break
	sleep 0.1
done

echo
echo "== what the sink received (one line per POST)"
as_postgres python3 "$work/src/test/sink/replicant_sink.py" bodies --db "$work/sink.db"
echo
echo "== what the sink now holds for public.orders"
as_postgres python3 "$work/src/test/sink/replicant_sink.py" dump --db "$work/sink.db" --table public.orders
echo
echo "== replicant.status"
psql_demo -x -c "SELECT * FROM replicant.status"
