#!/usr/bin/env bash
# Prints each daemon of the real-Nova test cloud: running or not, its PID and
# the resident memory of its whole session (the daemon and its children),
# then the total. Exits 1 when any daemon is down.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NAMES=(mariadb epmd rabbitmq neutron keystone placement glance-api
	nova-conductor nova-scheduler nova-api nova-compute nova-compute-2 nova-compute-3)
total=0
down=0
for name in "${NAMES[@]}"; do
	if running "$name"; then
		pid=$(cat "$RUN/$name.pid")
		kb=$(ps -o rss= -s "$pid" | awk '{s += $1} END {print s + 0}')
		total=$((total + kb))
		printf '%-15s up    pid %-7s %6d MiB\n' "$name" "$pid" $((kb / 1024))
	else
		printf '%-15s DOWN\n' "$name"
		down=1
	fi
done
printf '%-15s %25d MiB\n' total $((total / 1024))
exit $down
