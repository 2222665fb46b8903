#!/usr/bin/env bash
# Prints each daemon of the real-Nova test cloud: running or not, its PID and
# the resident memory of its whole session (the daemon and its children),
# then the total. Exits 1 when any daemon is down.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

daemon_status mariadb epmd rabbitmq neutron keystone placement glance-api \
	nova-conductor nova-scheduler nova-api nova-compute nova-compute-2 nova-compute-3
