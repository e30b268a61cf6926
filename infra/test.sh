#!/usr/bin/env bash
# npm test: gets what the suite needs (npm packages, Docker engine, Temporal
# CLI, Temporal's Java test server, PostgreSQL, Chromium, Kubernetes), checks types, lint
# and format, then runs every test against the real services. Extra arguments go to jest (e.g. npm test -- test/unit).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
prepare_machine
bash "$ROOT/infra/test-services.sh"
bash "$ROOT/infra/test-server.sh" >/dev/null # the time-skipping server of test/workflow
bash "$ROOT/infra/temporal-pg.sh" build      # Temporal on PostgreSQL: test/temporal-pg, multi-host, deployment-run
bash "$ROOT/infra/k8s-cluster.sh" build >/dev/null # Kubernetes for test/e2e/k8s-cluster (10 to 20 min the first time)
step "type check, lint, format"
npx tsc --noEmit
npx eslint .
npx prettier --check . >/dev/null || { npx prettier --check .; exit 1; }
step "tests: real Temporal dev server, Docker and git (the first run builds the sandbox image)"
npx jest --runInBand "$@"
