#!/usr/bin/env bash
# Installs what orchestrate's tests need on a fresh Debian machine, and does
# nothing for what is already there. The Consul agent is built by `make
# consul`; this script covers Debian packages.
set -euo pipefail

# Debian packages the tests run for real, and a command each provides (or,
# for a package without one, an absolute path of a file it installs).
declare -A need=(
	[puppet]=puppet
	[prometheus]=prometheus
	[puppet-lint]=puppet-lint
	[lintian]=lintian
	[man-db]=man
	# A real terminal for `orchestrate status --watch` (its tmux test).
	[tmux]=tmux
	[systemd]=systemd-analyze
	# `script`, which runs orchestrate on a pseudo-terminal for the
	# confirmation tests.
	[bsdutils]=script
	# The lab's network (lab/netlab, go test -tags lab): the bridge, veths
	# and network namespaces, and the guard and partitions.
	[iproute2]=ip
	[python3]=python3
	# The lab (lab/README.md): containers, their image, its repository's
	# signature, partitions.
	[systemd-container]=systemd-nspawn
	[mmdebstrap]=mmdebstrap
	[gnupg]=gpg
	[nftables]=nft
	# A real Swift for the failure-log tests (scripts/swift, internal/swifttest):
	# the four servers, swift-ring-builder (their dependency `swift`), the
	# `swift` client, and memcached, where tempauth keeps its tokens.
	[swift-proxy]=swift-proxy-server
	[swift-account]=swift-account-server
	[swift-container]=swift-container-server
	[swift-object]=swift-object-server
	[python3-swiftclient]=swift
	[memcached]=memcached
	# Shell completion (orchestrate completion bash|zsh|fish), run for real
	# by the shells themselves: bash-completion's loader, zsh's compinit,
	# fish's complete -C.
	[bash-completion]=/usr/share/bash-completion/bash_completion
	[zsh]=zsh
	[fish]=fish
)

missing=()
for pkg in "${!need[@]}"; do
	case ${need[$pkg]} in
	/*) [ -e "${need[$pkg]}" ] || missing+=("$pkg") ;;
	*) command -v "${need[$pkg]}" >/dev/null 2>&1 || missing+=("$pkg") ;;
	esac
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		echo "install-test-deps: need root to apt-get install ${missing[*]}" >&2
		exit 1
	fi
fi
# policy-rc.d exiting 101 tells invoke-rc.d not to start the daemons the
# packages ship (the Swift servers, prometheus): the tests start their own,
# on loopback, under a directory of their own. Only ours is removed after.
prc=/usr/sbin/policy-rc.d
ours=
if [ ! -e "$prc" ]; then
	${SUDO:-} sh -c "printf '#!/bin/sh\\n# install-test-deps: start nothing\\nexit 101\\n' >$prc && chmod 755 $prc"
	ours=1
fi
trap 'if [ -n "$ours" ]; then ${SUDO:-} rm -f "$prc"; fi' EXIT
echo "install-test-deps: apt-get install ${missing[*]}"
${SUDO:-} env DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=600
${SUDO:-} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	-o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
