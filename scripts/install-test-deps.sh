#!/usr/bin/env bash
# Installs what orchestrate's tests need on a fresh Debian machine, and does
# nothing for what is already there. The Consul agent is built by `make
# consul`; this script covers Debian packages.
set -euo pipefail

# Debian packages the tests run for real, and a command each provides.
declare -A need=(
	[puppet]=puppet
	[prometheus]=prometheus
	[puppet-lint]=puppet-lint
	[lintian]=lintian
	[man-db]=man
	[systemd]=systemd-analyze
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
)

missing=()
for pkg in "${!need[@]}"; do
	command -v "${need[$pkg]}" >/dev/null 2>&1 || missing+=("$pkg")
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
echo "install-test-deps: apt-get install ${missing[*]}"
${SUDO:-} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
${SUDO:-} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
