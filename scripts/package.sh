#!/bin/sh
# `make package`: builds orchestrate_<version>_amd64.deb into $DIST (default
# dist/) with nfpm, from the binaries, man pages and documents it stages in
# build/package/. Reproducible: every timestamp is the commit's
# (SOURCE_DATE_EPOCH), binaries are built with -trimpath.
#
# Environment: VERSION (default scripts/version.sh), COMMIT (default
# git rev-parse HEAD), DIST, GO (default go), NFPM (the nfpm command).
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
DIST=${DIST:-dist}
NFPM=${NFPM:?NFPM is the nfpm command; run make package}
VERSION=${VERSION:-$(scripts/version.sh)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
case "$VERSION$COMMIT" in
*[!0-9A-Za-z.+~-]*)
	echo "package: VERSION and COMMIT may hold only letters, digits and . + ~ -" >&2
	exit 2
	;;
esac
DEB_VERSION=$(scripts/version.sh --deb "$VERSION")
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export DEB_VERSION SOURCE_DATE_EPOCH

stage=build/package
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/man" "$stage/completion/bash" "$stage/completion/zsh" "$stage/completion/fish" "$stage/doc/docs" "$stage/doc/examples" "$stage/doc/puppet" "$DIST"

# The shipped binaries, cmd/<name> (the Makefile's BINARIES). cmd/demo and
# cmd/benchtable are the project's own programs, run by make demo and make
# bench, and are not shipped.
binaries='hiera-services orchestrate reaper service-blocker'
pkgs=$(for bin in $binaries; do echo "./cmd/$bin"; done)

# Static, position-independent (static-pie: ASLR without a C toolchain or a
# libc dependency), stripped binaries stamped with the version.
ldflags="-s -w -X github.com/jiocloud/orchestrate/internal/cli.version=$VERSION -X github.com/jiocloud/orchestrate/internal/cli.commit=$COMMIT"
CGO_ENABLED=0 "$GO" build -trimpath -buildmode=pie -ldflags "$ldflags" -o "$stage/bin/" $pkgs

# Man pages and shell completion scripts, written by the binaries
# themselves from the help and FlagSets they parse, so neither drifts:
# NAME.1 and, for subcommands, NAME-SUB.1 (orchestrate-status.1). Run with
# an empty environment, so that no default from it ($ORCHESTRATE_PREFIX)
# lands in a page.
for bin in $binaries; do
	env -i "$stage/bin/$bin" help --man-dir "$stage/man"
	env -i "$stage/bin/$bin" completion bash >"$stage/completion/bash/$bin"
	env -i "$stage/bin/$bin" completion zsh >"$stage/completion/zsh/_$bin"
	env -i "$stage/bin/$bin" completion fish >"$stage/completion/fish/$bin.fish"
done
for page in "$stage"/man/*.1; do
	gzip -9n "$page"
done

# Documents (compressed, as Debian policy asks of anything but copyright):
# the front page, the pages it links to in docs/ (the man pages and the
# units' Documentation= name them), the reaper's and the module's READMEs.
doc=$stage/doc
gzip -9nc README.md >"$doc/README.md.gz"
for f in docs/*.md; do
	gzip -9nc "$f" >"$doc/docs/$(basename "$f").gz"
done
gzip -9nc reaper/README.md >"$doc/reaper.md.gz"
gzip -9nc puppet/orchestrate/README.md >"$doc/puppet/README.md.gz"
for f in examples/*.yaml; do
	[ -f "$f" ] && gzip -9nc "$f" >"$doc/examples/$(basename "$f").gz"
done
# The Puppet module (class orchestrate, orchestrate::reaper,
# orchestrate::service_blocker), where Debian's puppet finds modules: its
# modulepath ends in /usr/share/puppet/modules.
mod=$stage/puppet/orchestrate
for d in manifests templates types examples; do
	mkdir -p "$mod/$d"
	install -m 0644 puppet/orchestrate/$d/* "$mod/$d/"
done
install -m 0644 puppet/orchestrate/metadata.json puppet/orchestrate/README.md "$mod/"
when=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
{
	echo "orchestrate ($DEB_VERSION) unstable; urgency=medium"
	echo
	echo "  * $VERSION, built from commit"
	echo "    $COMMIT."
	echo
	echo " -- orchestrate developers <orchestrate@jiocloud.example>  $when"
} | gzip -9n >"$doc/changelog.gz"
packaging/copyright.sh "$GO" $pkgs >"$doc/copyright"

touch -d "@$SOURCE_DATE_EPOCH" $(find "$stage" -type f)
out=$DIST/orchestrate_${DEB_VERSION}_amd64.deb
rm -f "$out"
$NFPM package --config packaging/nfpm.yaml --packager deb --target "$out" >"$stage/nfpm.log" 2>&1 || { cat "$stage/nfpm.log" >&2; exit 1; }
echo "$out"
