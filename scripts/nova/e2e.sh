#!/usr/bin/env bash
# `make e2e-nova`: bring the real-Nova test cloud up, run go test against it
# (NOVA_E2E_ENV pointing at the env file), then stop every daemon it started,
# whatever the outcome. Fails when a test fails. A cloud that was already
# fully up (`make nova-up` by hand, someone else's run) is used and left
# running: it is not this run's to stop.
#
#   e2e.sh            go test -race -count=1 -run Nova ./internal/novatest/ ./reaper/...
#                     with the env file's OS_* (the cloud's admin) exported too
#   e2e.sh ARGS...    go test -race -count=1 ARGS...  (e.g. ./... for the whole
#                     suite), OS_* not exported: unit tests keep a clean environment
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
GO=${GO:-go}

if "$here/status.sh" >/dev/null 2>&1 && [ -f "$NOVA_E2E_DIR/env" ]; then
	log "the cloud in $NOVA_E2E_DIR is already up: using it, leaving it running"
else
	trap '"$here/stop.sh"' EXIT
fi
"$here/up.sh"
if [ $# -eq 0 ]; then
	set -- -run Nova ./internal/novatest/ ./reaper/...
	set -a
	. "$NOVA_E2E_DIR/env"
	set +a
fi
export NOVA_E2E_ENV=$NOVA_E2E_DIR/env
cd "$here/../.."
"$GO" test -race -count=1 "$@"
