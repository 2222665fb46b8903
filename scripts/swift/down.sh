#!/usr/bin/env bash
# `make swift-down`: stop the real-Swift test store (stop.sh; --purge removes
# its directory too).
set -euo pipefail
exec "$(dirname "$0")/stop.sh" "$@"
