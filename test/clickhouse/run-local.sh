#!/usr/bin/env bash
# test/clickhouse/run-local.sh -- a throwaway ClickHouse server to try
# format => 'clickhouse' with (README, "ClickHouse quick start").
#
#   bash test/clickhouse/run-local.sh PORT DIR     # start; prints how to reach it
#   bash test/clickhouse/run-local.sh stop DIR     # stop it (DIR stays; rm -rf it)
#
# Starts clickhouse-server (Debian 12's 18.16: apt-get install
# clickhouse-server clickhouse-client; current servers work too) with its
# data, logs and configuration in DIR, listening on 127.0.0.1 only: HTTP on
# PORT, the native protocol (clickhouse-client) on PORT + 1.  It creates the
# database "replica" and the user "writer" (password: $CLICKHOUSE_PASSWORD,
# default "writer-password"), which README's examples use; the user
# "default" has no password and is reachable from loopback only.  Run as
# root, the server runs as the "clickhouse" OS user the package creates
# (DIR is given to it); run as anyone else, as that user.  The
# configuration is test/clickhouse/config.xml, which the TAP tests use too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() {
	echo "usage: bash $0 PORT DIR | bash $0 stop DIR" >&2
	exit 2
}
[ $# -eq 2 ] || usage

# query PORT SQL: runs one query over HTTP as "default" (no curl needed);
# prints the answer's body, fails unless the answer is 200.
query() {
	local port=$1 sql=$2 status body
	exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
	printf 'POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s' \
		"$(printf '%s' "$sql" | wc -c)" "$sql" >&3
	body=$(cat <&3) || true
	exec 3<&-
	status=$(printf '%s' "$body" | head -n1 | cut -d' ' -f2)
	body=${body#*$'\r\n\r\n'}
	[ "$status" = 200 ] || { printf '%s\n' "$body" >&2; return 1; }
	printf '%s' "$body"
}

if [ "$1" = stop ]; then
	dir=$(cd "$2" && pwd)
	[ -s "$dir/clickhouse.pid" ] || { echo "no server started in $dir" >&2; exit 1; }
	pid=$(cat "$dir/clickhouse.pid")
	if kill "$pid" 2>/dev/null; then
		# ClickHouse takes a few seconds to stop (idle connections first).
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid"
			echo "clickhouse-server $pid did not stop in 30 s: killed" >&2
		fi
	fi
	rm -f "$dir/clickhouse.pid"
	echo "clickhouse-server stopped; its data is in $dir (rm -rf $dir)"
	exit 0
fi

port=$1
[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -gt 0 ] && [ "$port" -lt 65535 ] || usage
tcp_port=$((port + 1))
password=${CLICKHOUSE_PASSWORD:-writer-password}
case "$password" in *[\<\>\&]*)
	echo "CLICKHOUSE_PASSWORD must not contain <, > or &" >&2
	exit 2
	;;
esac
server=${CLICKHOUSE_SERVER:-}
for candidate in /usr/sbin/clickhouse-server /usr/bin/clickhouse-server; do
	[ -n "$server" ] || [ ! -x "$candidate" ] || server=$candidate
done
[ -n "$server" ] || server=$(command -v clickhouse-server || true)
if [ -z "$server" ]; then
	echo "clickhouse-server is not installed: sudo apt-get install clickhouse-server clickhouse-client" >&2
	exit 1
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	echo "port $port is taken on 127.0.0.1" >&2
	exit 1
fi

mkdir -p "$2"
dir=$(cd "$2" && pwd)
if [ -s "$dir/clickhouse.pid" ] && kill -0 "$(cat "$dir/clickhouse.pid")" 2>/dev/null; then
	echo "a server started in $dir is running: bash $0 stop $dir" >&2
	exit 1
fi
sed -e "s|@DIR@|$dir|g" -e "s|@LOG@|$dir/clickhouse.log|g" \
	-e "s|@ERRORLOG@|$dir/clickhouse.err.log|g" \
	-e "s|@HTTP_PORT@|$port|g" -e "s|@TCP_PORT@|$tcp_port|g" \
	"$here/config.xml" >"$dir/config.xml"
cat >"$dir/users.xml" <<USERS
<?xml version="1.0"?>
<!-- Written by test/clickhouse/run-local.sh: "default" without a password
     and "writer" with one, both from loopback only. -->
<yandex>
    <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
        <writer>
            <password>$password</password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </writer>
    </users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
        <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
    </interval></default></quotas>
</yandex>
USERS

chmod 600 "$dir/users.xml"    # it holds the password
run_as=()
if [ "$(id -u)" -eq 0 ]; then
	# clickhouse-server runs as the package's unprivileged user, never root.
	id clickhouse >/dev/null 2>&1 ||
		{ echo "no \"clickhouse\" OS user: install clickhouse-server" >&2; exit 1; }
	chown -R clickhouse: "$dir"
	run_as=(setpriv --reuid=clickhouse --regid=clickhouse --init-groups --)
fi
# setpriv execs the server, so $! is the server's own pid.
"${run_as[@]}" "$server" --config-file="$dir/config.xml" \
	</dev/null >>"$dir/clickhouse.stdout.log" 2>&1 &
echo $! >"$dir/clickhouse.pid"

for _ in $(seq 1 600); do
	if ! kill -0 "$(cat "$dir/clickhouse.pid")" 2>/dev/null; then
		echo "clickhouse-server exited at start; see $dir/clickhouse.stdout.log and $dir/clickhouse.log" >&2
		rm -f "$dir/clickhouse.pid"
		exit 1
	fi
	[ "$(query "$port" 'SELECT 1' 2>/dev/null)" = 1 ] && break
	sleep 0.1
done
version=$(query "$port" 'SELECT version()') ||
	{ echo "clickhouse-server does not answer on port $port; see $dir/clickhouse.log" >&2; exit 1; }
query "$port" 'CREATE DATABASE IF NOT EXISTS replica' >/dev/null

cat <<DONE
clickhouse-server $version is running (pid $(cat "$dir/clickhouse.pid")), data in $dir
  HTTP (sink_url):   http://127.0.0.1:$port/?database=replica
  headers:           {"X-ClickHouse-User": "writer", "X-ClickHouse-Key": "$password"}
  clickhouse-client: clickhouse-client --port $tcp_port --user writer --password $password
  stop:              bash $0 stop $dir
DONE
