#!/usr/bin/env bash
# `make e2e-nova`: bring the real-Nova test cloud up, run go test against it
# (the env file's variables exported, NOVA_E2E_ENV pointing at it), then stop
# every daemon it started, whatever the outcome. Fails when a test fails.
#
#   e2e.sh                 go test -race -count=1 -run Nova ./internal/novatest/ ./reaper/...
#   e2e.sh ARGS...         go test -race -count=1 ARGS...   (e.g. ./... for the whole suite)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
GO=${GO:-go}

if [ $# -eq 0 ]; then
	set -- -run Nova ./internal/novatest/ ./reaper/...
fi
trap '"$here/stop.sh"' EXIT
"$here/up.sh"
set -a
. "$NOVA_E2E_DIR/env"
set +a
export NOVA_E2E_ENV=$NOVA_E2E_DIR/env
cd "$here/../.."
"$GO" test -race -count=1 "$@"
