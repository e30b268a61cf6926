#!/usr/bin/env bash
# npm start: gets what is missing on this machine (npm packages, Docker engine,
# Temporal CLI), then runs `drydock up` (dev server, base image, worker).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
prepare_machine
exec node bin/drydock up
