#!/usr/bin/env bash
# Stops every daemon start.sh (or configure.sh) started, by the PIDs recorded
# in $NOVA_E2E_DIR/run: SIGTERM to each daemon's session (its own process
# group), then SIGKILL to whatever is left after 20 s. Touches no other
# process. Leaves the data under $NOVA_E2E_DIR for a fast next start;
# `stop.sh --purge` removes the directory too.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# Clients first, servers they talk to last.
ORDER=(nova-compute-3 nova-compute-2 nova-compute nova-api nova-scheduler nova-conductor glance-api placement
	keystone neutron rabbitmq epmd mariadb)
rm -f "$NOVA_E2E_DIR/env"
stop_daemons 20 "${ORDER[@]}"
if [ "${1:-}" = --purge ]; then
	rm -rf "$NOVA_E2E_DIR"
	log "removed $NOVA_E2E_DIR"
fi
log "stopped"
