#!/usr/bin/env bash
# `make e2e-nova`: bring the real-Nova test cloud up, run go test against it
# (NOVA_E2E_ENV pointing at the env file), then stop every daemon it started,
# whatever the outcome. Fails when a test fails.
#
#   e2e.sh            go test -race -count=1 -run Nova ./internal/novatest/ ./reaper/...
#                     with the env file's OS_* (the cloud's admin) exported too
#   e2e.sh ARGS...    go test -race -count=1 ARGS...  (e.g. ./... for the whole
#                     suite), OS_* not exported: unit tests keep a clean environment
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
GO=${GO:-go}

trap '"$here/stop.sh"' EXIT
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
