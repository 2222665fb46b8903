#!/usr/bin/env bash
# Prints each daemon of the real-Swift test store: up or DOWN, its PID and
# the resident memory of its session, then the total. Exits 1 when any is
# down.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

daemon_status memcached account container object proxy
