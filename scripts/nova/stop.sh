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
pids=()
for name in "${ORDER[@]}"; do
	if running "$name"; then
		pid=$(cat "$RUN/$name.pid")
		kill -TERM -- "-$pid" 2>/dev/null || true
		pids+=("$pid")
		log "stopping $name (pid $pid)"
	fi
	rm -f "$RUN/$name.pid"
done
for ((i = 0; i < 200; i++)); do
	left=()
	for pid in ${pids[@]+"${pids[@]}"}; do
		# Any process still in the daemon's process group.
		if pgrep -g "$pid" >/dev/null 2>&1; then left+=("$pid"); fi
	done
	[ ${#left[@]} -eq 0 ] && break
	sleep 0.1
done
for pid in ${left[@]+"${left[@]}"}; do
	log "process group $pid did not stop in 20s: SIGKILL"
	kill -KILL -- "-$pid" 2>/dev/null || true
done
if [ "${1:-}" = --purge ]; then
	rm -rf "$NOVA_E2E_DIR"
	log "removed $NOVA_E2E_DIR"
fi
log "stopped"
