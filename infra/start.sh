#!/usr/bin/env bash
# npm start: gets what is missing on this machine (npm packages, Docker engine,
# Temporal CLI), then runs `drydock up` (dev server, base image, worker).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
bash infra/deps.sh
bash infra/docker.sh
temporal_cli=$(bash infra/temporal.sh)
export PATH="$(dirname "$temporal_cli"):$PATH"
exec node bin/drydock up
