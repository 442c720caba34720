#!/usr/bin/env bash
# test/private-pg.sh -- a private, relocated copy of the host's PostgreSQL
# installation, so that several checkouts can install and test their own
# replicant.so at the same time without overwriting each other's.
#
#   sudo bash test/private-pg.sh DIR [MAJOR]      # prints DIR's pg_config
#   sudo bash .ci/suite.sh "$(bash test/private-pg.sh /var/tmp/pg-a)" test/t/001_stream.pl
#
# PostgreSQL finds its library and share directories relative to its own
# binaries, so copying Debian's /usr/lib/postgresql/MAJOR, /usr/share/
# postgresql/MAJOR and /usr/include/postgresql under DIR/usr gives an
# installation whose pg_config, `make install` and `make installcheck` all
# stay inside DIR.  The copy is made once and refreshed when the host's
# server package changes (its postgres binary differs).  MAJOR defaults to 15.
set -euo pipefail

dir=${1:?usage: test/private-pg.sh DIR [MAJOR]}
major=${2:-15}
src_bin=/usr/lib/postgresql/$major/bin/postgres
[ -x "$src_bin" ] || { echo "test/private-pg.sh: no PostgreSQL $major at $src_bin" >&2; exit 1; }
[ -d "/usr/include/postgresql/$major/server" ] ||
	{ echo "test/private-pg.sh: install postgresql-server-dev-$major first" >&2; exit 1; }

dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
exec 9>"$dir/.lock"
flock 9
if ! cmp -s "$src_bin" "$dir/usr/lib/postgresql/$major/bin/postgres"; then
	rm -rf "$dir/usr"
	mkdir -p "$dir/usr/lib/postgresql" "$dir/usr/share/postgresql" "$dir/usr/include"
	cp -a "/usr/lib/postgresql/$major" "$dir/usr/lib/postgresql/"
	cp -a "/usr/share/postgresql/$major" "$dir/usr/share/postgresql/"
	cp -a /usr/include/postgresql "$dir/usr/include/"
fi
echo "$dir/usr/lib/postgresql/$major/bin/pg_config"
