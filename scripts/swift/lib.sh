# Shared settings for the scripts/swift/* scripts: sourced, never run.
#
# A real, single-replica OpenStack Swift (Debian's swift-proxy,
# swift-account, swift-container, swift-object, 2.30) for the failure-log
# tests: everything it writes lives under $SWIFT_E2E_DIR (default
# /tmp/orchestrate-swift): configuration, rings, the object store itself (a
# plain directory, mount_check = false), logs, PID files and the env file.
# Every server listens on 127.0.0.1 only, but the proxy: it listens on
# $SWIFT_E2E_HOST (default 127.0.0.1), which the lab sets to its bridge's
# host address so that its containers reach it (as scripts/nova's
# NOVA_E2E_HOST); the account, container and object servers and memcached
# stay on loopback, reached by the proxy alone.

SWIFT_E2E_DIR=${SWIFT_E2E_DIR:-/tmp/orchestrate-swift}
export SWIFT_E2E_DIR

# Debian's python3, not whatever python3 comes first on PATH: only it sees
# the swift packages.
PY=/usr/bin/python3

# running, spawn, wait_up, stop_daemons, daemon_status, secret.
. "$(dirname "${BASH_SOURCE[0]}")/../lib/daemons.sh"

# The ports sit below Linux's ephemeral range (32768-60999), beside the
# real Nova's 24700-24709 (scripts/nova), so that tests asking the kernel
# for a free port never collide with them. SWIFT_E2E_PORT_BASE moves them
# all; internal/swifttest passes free ports one by one instead
# (SWIFT_E2E_PROXY_PORT and so on).
PORT_BASE=${SWIFT_E2E_PORT_BASE:-24720}
HOST=${SWIFT_E2E_HOST:-127.0.0.1}
[[ $HOST =~ ^(127\.[0-9]{1,3}|198\.1[89])\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || {
	printf 'swift-e2e: error: SWIFT_E2E_HOST=%q: want a loopback (127/8) or lab bridge (198.18/15) IPv4 address\n' "$HOST" >&2
	exit 2
}
PROXY_PORT=${SWIFT_E2E_PROXY_PORT:-$((PORT_BASE + 0))}
ACCOUNT_PORT=${SWIFT_E2E_ACCOUNT_PORT:-$((PORT_BASE + 1))}
CONTAINER_PORT=${SWIFT_E2E_CONTAINER_PORT:-$((PORT_BASE + 2))}
OBJECT_PORT=${SWIFT_E2E_OBJECT_PORT:-$((PORT_BASE + 3))}
MEMCACHE_PORT=${SWIFT_E2E_MEMCACHE_PORT:-$((PORT_BASE + 4))}

ETC=$SWIFT_E2E_DIR/etc
LOGS=$SWIFT_E2E_DIR/log
RUN=$SWIFT_E2E_DIR/run
SRV=$SWIFT_E2E_DIR/srv
SECRETS=$SWIFT_E2E_DIR/secrets

# Clients first, the servers they talk to last.
DAEMONS=(proxy object container account memcached)

log() { printf '%s swift-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# check_ports: every port a number in 1-65535 (exit 2 otherwise).
check_ports() {
	local p
	for p in "$PROXY_PORT" "$ACCOUNT_PORT" "$CONTAINER_PORT" "$OBJECT_PORT" "$MEMCACHE_PORT"; do
		if ! [[ $p =~ ^[0-9]{1,5}$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
			printf '%s swift-e2e: error: port %q: want a number from 1 to 65535\n' "$(date -u +%H:%M:%S)" "$p" >&2
			exit 2
		fi
	done
}

# tcp_up PORT [ADDR]: whether something accepts TCP on ADDR:PORT (ADDR
# 127.0.0.1 by default).
tcp_up() {
	"$PY" -c 'import socket,sys; socket.create_connection((sys.argv[2], int(sys.argv[1])), 1).close()' "$1" "${2:-127.0.0.1}"
}

