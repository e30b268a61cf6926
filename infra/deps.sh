#!/usr/bin/env bash
# Installs npm dependencies when node_modules is missing or older than the lockfile.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  step "installing npm dependencies (npm ci)"
  npm ci --no-audit --no-fund >&2
fi
