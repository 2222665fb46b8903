#!/bin/sh
# copyright.sh GO PACKAGE...: /usr/share/doc/orchestrate/copyright:
# orchestrate's own notice, then every Go module the binaries built from
# PACKAGE... (./cmd/<name>, the shipped ones) link, with its version and the
# text of its licence file(s) as the module proxy holds them; identical
# texts are printed once.
set -eu
GO=${1:?usage: copyright.sh GO PACKAGE...}
shift
[ $# -gt 0 ] || { echo "usage: copyright.sh GO PACKAGE..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# condense FILE: the licence text, with the full text of a licence Debian
# ships in /usr/share/common-licenses (Apache-2.0, GPL-3, MPL-2.0) replaced
# by a reference to it; notices before and after the licence text stay.
condense() {
	sed 's/[[:space:]]*$//' "$1" | awk '
		state == 0 && /^[[:space:]]*Apache License$/ { ref = "Apache-2.0"; state = 1 }
		state == 0 && /^[[:space:]]*GNU GENERAL PUBLIC LICENSE$/ { ref = "GPL-3"; state = 1 }
		state == 0 && /^[[:space:]]*Mozilla Public License,? [Vv]ersion 2\.0$/ { ref = "MPL-2.0"; state = 3 }
		state == 1 {
			print "The " ref " licence, in full in /usr/share/common-licenses/" ref "."
			said = 1
			state = 2
			next
		}
		state == 2 && /END OF TERMS AND CONDITIONS/ { state = (ref == "GPL-3") ? 3 : 4; next }
		state == 2 { next }
		state == 3 {
			if (!said) print "The " ref " licence, in full in /usr/share/common-licenses/" ref "."
			said = 1
			next
		}
		# The Apache licence'"'"'s appendix (how to apply it) ends with this line.
		state == 4 && /APPENDIX: How to apply the Apache License/ { state = 5; next }
		state == 5 && /limitations under the License\./ { state = 6; next }
		state == 5 { next }
		{ print }
	'
}

cat <<'HEAD'
orchestrate: Consul as the control plane of a Puppet-built OpenStack cloud.
Upstream: https://github.com/jiocloud/orchestrate

Copyright: the orchestrate developers.
License: the source repository states no licence yet (it has no LICENSE
 file); until it does, no licence is granted beyond what the law allows.

The binaries in this package are statically linked Go programs. They contain
the Go modules listed below, each under the licence whose text follows the
list under the number given.

HEAD
"$GO" list -deps -f '{{with .Module}}{{.Path}} {{.Version}} {{.Dir}}{{end}}' "$@" |
	sort -u | grep -v '^github.com/jiocloud/orchestrate ' >"$tmp/modules"
# The Go standard library and runtime, linked into every binary.
echo "the-Go-standard-library $("$GO" env GOVERSION) $("$GO" env GOROOT)" >>"$tmp/modules"
n=0
while read -r path version dir; do
	lic=$(find "$dir" -maxdepth 1 -type f \( -iname 'licen[cs]e*' -o -iname 'copying*' \) | sort | head -1)
	# Dual-licensed modules without a LICENSE file name each licence (APLv2, GPLv3).
	[ -n "$lic" ] || lic=$(find "$dir" -maxdepth 1 -type f \( -iname 'apl*' -o -iname 'gpl*' -o -iname 'mit*' -o -iname 'bsd*' \) | sort)
	if [ -z "$lic" ]; then
		echo "  $path $version: no licence file in the module"
		continue
	fi
	nums=
	for f in $lic; do
		sum=$(condense "$f" | sha256sum | cut -c1-16)
		if [ ! -f "$tmp/$sum" ]; then
			n=$((n + 1))
			echo "$n" >"$tmp/$sum.n"
			condense "$f" >"$tmp/$sum"
			echo "$sum" >>"$tmp/order"
		fi
		nums="$nums${nums:+ and }licence $(cat "$tmp/$sum.n")"
	done
	echo "  $path $version: $nums"
done <"$tmp/modules"
while read -r sum; do
	echo
	echo "----------------------------------------------------------------------"
	echo "Licence $(cat "$tmp/$sum.n")"
	echo
	cat "$tmp/$sum"
done <"$tmp/order"
