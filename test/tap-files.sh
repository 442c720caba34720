#!/usr/bin/env bash
# test/tap-files.sh -- the TAP files that run on one PostgreSQL major version.
#
#   bash test/tap-files.sh MAJOR [TAP-FILE...]
#
# Prints, one per line, each given file (default: every test/t/*.pl) that
# runs on MAJOR.  A file says where it runs with a line in its header comment:
#
#   # versions: all          every version CI runs (15, 17 and 18)
#   # versions: 15 18        the versions listed
#   # versions: all (why)    text in parentheses is a comment
#
# A file without such a line runs on 15 and 18, the oldest and the newest
# version.  Tag "all" what depends on the server version: failover and
# standbys, generated columns, publication semantics (row filters, column
# lists, partition roots, publish actions), slot handling, the decoding
# internals that src/compat.h papers over, and the differential test.
# On a version CI does not run (neither 15, 17 nor 18) every file runs.
# .ci/suite.sh runs this when it is given no TAP files.
set -euo pipefail

ALL_VERSIONS="15 17 18"
DEFAULT_VERSIONS="15 18"

major=${1:?usage: test/tap-files.sh MAJOR [TAP-FILE...]}
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -eq 0 ]; then
	cd "$repo"
	set -- test/t/*.pl
fi

case " $ALL_VERSIONS " in
*" $major "*) ;;
*)
	printf '%s\n' "$@"
	exit 0
	;;
esac

for file in "$@"; do
	# The first "# versions:" line of the file's first 40 lines.
	tag=$(awk 'NR > 40 { exit } sub(/^# versions:/, "") { sub(/\(.*/, ""); print; exit }' "$file")
	read -r -a words <<<"$tag" # without the blanks around
	versions=${words[*]}
	versions=${versions:-$DEFAULT_VERSIONS}
	[ "$versions" = all ] && versions=$ALL_VERSIONS
	for v in $versions; do
		case " $ALL_VERSIONS " in
		*" $v "*) ;;
		*)
			echo "test/tap-files.sh: $file: unknown version \"$v\" in its \"# versions:\" line" >&2
			exit 2
			;;
		esac
	done
	case " $versions " in
	*" $major "*) echo "$file" ;;
	esac
done
