#!/usr/bin/env bash
# Prints each daemon of the real-Swift test store: up or DOWN, its PID and
# the resident memory of its session, then the total. Exits 1 when any is
# down.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

total=0
down=0
for name in memcached account container object proxy; do
	if running "$name"; then
		pid=$(cat "$RUN/$name.pid")
		kb=$(ps -o rss= -s "$pid" | awk '{s += $1} END {print s + 0}')
		total=$((total + kb))
		printf '%-10s up    pid %-7s %6d MiB\n' "$name" "$pid" $((kb / 1024))
	else
		printf '%-10s DOWN\n' "$name"
		down=1
	fi
done
printf '%-10s %25d MiB\n' total $((total / 1024))
exit $down
