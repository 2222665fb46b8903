#!/bin/sh
# Prints the version of the source tree, as every binary's --version and
# the package say it.
#
#   version.sh         git describe: v1.2.3, v1.2.3-4-gabcdef0 (4 commits
#                      after v1.2.3), with -dirty when tracked files differ
#                      from the commit; before the first v* tag,
#                      v0.0.0-N-gHASH with N the number of commits; outside
#                      a git checkout, dev
#   version.sh --deb [VERSION]
#                      VERSION (default: the above) as a Debian version, which must start with a
#                      digit and sort in build order: 1.2.3, 1.2.3+4.gabcdef0,
#                      1.2.3+4.gabcdef0+dirty, 0.0.0~dev
set -eu
cd "$(dirname "$0")/.."

describe() {
	if ! git rev-parse --git-dir >/dev/null 2>&1; then
		echo dev
		return
	fi
	if git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null; then
		return
	fi
	dirty=
	git diff --quiet HEAD -- 2>/dev/null || dirty=-dirty
	echo "v0.0.0-$(git rev-list --count HEAD)-g$(git rev-parse --short=7 HEAD)$dirty"
}

case "${1:-}" in
--deb) v=${2:-$(describe)} ;;
*) v=$(describe) ;;
esac
case "${1:-}" in
"") echo "$v" ;;
--deb)
	if [ "$v" = dev ]; then
		echo 0.0.0~dev
	else
		# v1.2.3-4-gabc-dirty -> 1.2.3+4.gabc+dirty; v1.2.3-rc1 -> 1.2.3~rc1
		d=$(echo "$v" | sed -e 's/^v//' -e 's/-\([0-9][0-9]*\)-g\([0-9a-f]*\)/+\1.g\2/' -e 's/-dirty$/+dirty/' -e 's/-/~/g')
		case "$d" in
		[0-9]*) ;;
		*)
			echo "version.sh: $v: a package version must start with a digit (tag releases vX.Y.Z)" >&2
			exit 2
			;;
		esac
		case "$d" in
		*[!0-9A-Za-z.+~]*)
			echo "version.sh: $v: a package version may hold only letters, digits and . + ~ -" >&2
			exit 2
			;;
		esac
		echo "$d"
	fi
	;;
*)
	echo "usage: version.sh [--deb [VERSION]]" >&2
	exit 2
	;;
esac
