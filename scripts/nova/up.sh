#!/usr/bin/env bash
# `make nova-up`: install (if needed), configure and start the real-Nova test
# cloud. Idempotent: a second run finds everything in place and returns fast.
set -euo pipefail
here=$(dirname "$0")
"$here/install.sh"
"$here/configure.sh"
"$here/start.sh"
