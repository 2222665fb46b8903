#!/usr/bin/env bash
# `make e2e-nova`: bring the real-Nova test cloud up, run every test whose
# name contains "Nova" in internal/novatest and reaper/... against it (the
# env file's variables exported, NOVA_E2E_ENV pointing at it), then stop
# every daemon it started, whatever the outcome. Fails when a test fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
GO=${GO:-go}

trap '"$here/stop.sh"' EXIT
"$here/up.sh"
set -a
. "$NOVA_E2E_DIR/env"
set +a
export NOVA_E2E_ENV=$NOVA_E2E_DIR/env
cd "$here/../.."
"$GO" test -race -count=1 -run 'Nova' ./internal/novatest/ ./reaper/...
