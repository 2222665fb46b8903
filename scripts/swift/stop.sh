#!/usr/bin/env bash
# Stops every daemon up.sh started, by the PIDs recorded in
# $SWIFT_E2E_DIR/run: SIGTERM to each daemon's session (its own process
# group), SIGKILL to what is left after 10 s. Touches no other process.
# Keeps the data for a fast next start; `stop.sh --purge` removes
# $SWIFT_E2E_DIR too.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rm -f "$SWIFT_E2E_DIR/env"
stop_daemons 10 "${DAEMONS[@]}"
# The watchdog last: it may be the one running this script.
if running watchdog && [ "$(cat "$RUN/watchdog.pid")" != "$(ps -o sid= -p $$ | tr -d ' ')" ]; then
	kill -TERM -- "-$(cat "$RUN/watchdog.pid")" 2>/dev/null || true
fi
if [ "${1:-}" = --purge ]; then
	# Only a directory up.sh configured: never rm -rf a mistyped path.
	if [ -f "$SWIFT_E2E_DIR/configured" ] || [ ! -e "$SWIFT_E2E_DIR" ]; then
		rm -rf "$SWIFT_E2E_DIR"
		log "removed $SWIFT_E2E_DIR"
	else
		log "not removing $SWIFT_E2E_DIR: up.sh did not configure it"
	fi
fi
log "stopped"
