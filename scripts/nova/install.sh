#!/usr/bin/env bash
# Installs what the real-Nova test cloud needs from Debian 12's OpenStack
# (Zed) packages: the Python libraries only, never the service packages, so
# nothing prompts (debconf, dbconfig) and nothing starts by itself. The
# api-paste ini files live in nova-common and glance-common: those two are
# downloaded and unpacked under $NOVA_E2E_DIR/pkg, not installed.
#
# Idempotent: does nothing when everything is already there. Needs root.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PKGS=(python3-nova python3-keystone python3-placement python3-glance
	python3-openstackclient rabbitmq-server mariadb-server
	# ps and pgrep, which start.sh, stop.sh and status.sh use.
	procps)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || die "need root to apt-get install ${missing[*]}"
	# policy-rc.d exiting 101 tells invoke-rc.d not to start the daemons the
	# packages ship (mariadb, rabbitmq); ours start under $NOVA_E2E_DIR.
	# Only ours is removed afterwards.
	prc=/usr/sbin/policy-rc.d
	ours=
	if [ ! -e "$prc" ]; then
		printf '#!/bin/sh\n# nova-e2e install: start nothing\nexit 101\n' >"$prc"
		chmod 755 "$prc"
		ours=1
	fi
	trap 'if [ -n "$ours" ]; then rm -f "$prc"; fi' EXIT
	mkdir -p "$LOGS"
	aptlog=$LOGS/apt.log
	log "apt-get update"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=600
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${missing[@]}" >"$aptlog" 2>&1 ||
		{ tail -30 "$aptlog" >&2; die "apt-get install failed: see $aptlog"; }
fi

# The api-paste ini files, from the -common packages, unpacked not installed.
pkg=$NOVA_E2E_DIR/pkg
if [ ! -f "$pkg/usr/share/nova-common/api-paste.ini" ] || [ ! -f "$pkg/usr/share/glance-common/glance-api-paste.ini" ]; then
	mkdir -p "$pkg/deb"
	download() { (cd "$pkg/deb" && apt-get download -qq -o APT::Sandbox::User=root nova-common glance-common); }
	if ! download; then
		# Package lists cleaned since the install (as container images do).
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=600
		download || die "apt-get download nova-common glance-common failed"
	fi
	for d in "$pkg"/deb/*.deb; do
		dpkg-deb -x "$d" "$pkg"
	done
	[ -f "$pkg/usr/share/nova-common/api-paste.ini" ] || die "nova-common has no usr/share/nova-common/api-paste.ini"
	[ -f "$pkg/usr/share/glance-common/glance-api-paste.ini" ] || die "glance-common has no usr/share/glance-common/glance-api-paste.ini"
fi
log "installed"
