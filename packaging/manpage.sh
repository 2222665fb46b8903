#!/bin/sh
# manpage.sh BINARY SUMMARY: writes a man page (section 1, roff) for BINARY
# on stdout, made from its own --help text, so the page never drifts from
# the binary; for orchestrate, every subcommand's --help too.
set -eu
bin=$1
summary=$2
name=$(basename "$bin")
version=$("$bin" --version | awk '{print $2}')

# roff: a backslash is \e; a line starting with . or ' would be a request.
esc() { sed -e 's/\\/\\e/g' -e 's/^[.'"'"']/\\\&&/'; }

cat <<HEAD
.TH ${name} 1 "" "orchestrate ${version}" "orchestrate"
.SH NAME
${name} \\- ${summary}
.SH SYNOPSIS
.nf
HEAD
"$bin" --help | sed -n 's/^usage: //p' | head -1 | esc
cat <<'MID'
.fi
.SH DESCRIPTION
The text below is the program's own \fB\-\-help\fR.
.PP
.nf
MID
"$bin" --help | sed '1{/^usage: /d}' | esc
echo ".fi"
if [ "$name" = orchestrate ]; then
	echo ".SH SUBCOMMANDS"
	"$bin" --help | sed -n 's/^  \([a-z][a-z-]*\).*/\1/p' | sort -u | while read -r sub; do
		echo ".SS $sub"
		echo ".nf"
		"$bin" "$sub" --help | esc
		echo ".fi"
	done
fi
# The documents the package ships about this binary (scripts/package.sh).
doc=/usr/share/doc/orchestrate
case $name in
orchestrate) pages="$doc/docs/orchestrate.md.gz $doc/docs/converge.md.gz $doc/docs/watches.md.gz" ;;
reaper) pages="$doc/docs/reaper.md.gz $doc/reaper.md.gz" ;;
*) pages="$doc/docs/$name.md.gz" ;;
esac
cat <<TAIL
.SH VERSION
\\fB${name} \\-\\-version\\fR prints the version, the commit and the Go version
the binary was built from.
.SH EXIT STATUS
0 done, or the answer is yes; 1 the answer is no; 2 usage or input error,
with a message naming what is wrong; 3 Consul or the cloud could not be
reached or refused.
.SH FILES
/etc/orchestrate/, /usr/share/orchestrate/acl/
.SH SEE ALSO
TAIL
br=
for p in $doc/README.md.gz $pages; do
	[ -z "$br" ] || echo "$br"
	echo "$p"
	br=.br
done
