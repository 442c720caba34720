#!/usr/bin/env bash
# .ci/cppcheck.sh -- static analysis of src/ with cppcheck; .ci/run calls it
# once (the findings do not depend on the server version).
#
#   bash .ci/cppcheck.sh [PG_CONFIG]
#
# Checks style, warning, performance and portability against the server
# headers of PG_CONFIG (default: pg_config on the PATH), in the one
# configuration the compiler sees (-D__GNUC__: cppcheck would otherwise try
# every #ifdef combination of the PostgreSQL headers, for many minutes).
# Fails on any finding not listed, with its reason, in
# .ci/cppcheck-suppressions.xml; .ci/cppcheck-prelude.h teaches cppcheck one
# PostgreSQL macro it misreads.
set -euo pipefail

PG_CONFIG=${1:-pg_config}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

cppcheck --version
rc=0
cppcheck --quiet --error-exitcode=1 \
	--enable=style,warning,performance,portability \
	--std=c99 --platform=unix64 --library=libcurl \
	-D__GNUC__ -D__x86_64__ \
	-I src -I "$("$PG_CONFIG" --includedir-server)" \
	--include=.ci/cppcheck-prelude.h \
	--suppress=missingIncludeSystem \
	--suppress-xml=.ci/cppcheck-suppressions.xml \
	--template='{file}:{line}:{column}: {severity}: {message} [{id}]\n{code}' \
	-j"$(nproc)" src/ 2>"$out" || rc=$?
cat "$out"
# cppcheck -j has been seen to print a finding and still exit 0: the output
# decides too.
findings=$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: [a-z]+: .* \[[A-Za-z0-9_]+\]$' "$out" || true)
if [ "$rc" != 0 ] || [ "$findings" != 0 ]; then
	echo "cppcheck: $findings finding(s) (exit status $rc)"
	exit 1
fi
echo "cppcheck: no findings"
