#!/usr/bin/env bash
# npm test: gets what the suite needs (npm packages, Docker engine, Temporal
# CLI, Temporal's Java test server, PostgreSQL, Chromium), checks types, lint
# and format, runs the fast suite under load (infra/load-check.sh, one round)
# and then the end-to-end suites against the real services, the fault drills
# beside the others (DRYDOCK_E2E_LANES=1: one after the other). The sandbox image,
# the longest first-run build, is built in the background meanwhile. Extra
# arguments go to jest instead (e.g. npm test -- test/unit).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

# Needs only Docker and the network: it builds beside the other first-run builds and the checks.
image_log="$DATA_DIR/base-image.log"
image_build=
start_image_build() {
  mkdir -p "$DATA_DIR"
  step "building the sandbox image in the background if it is missing (log: ${image_log#"$ROOT/"})"
  setsid npx tsx sandbox-images/base-image.ts >/dev/null 2>"$image_log" &
  image_build=$!
}
await_image() {
  [ -n "$image_build" ] || return 0
  wait "$image_build" || { tail -30 "$image_log" >&2; fail "building the sandbox image failed (log: $image_log)"; }
  image_build=
}
drills=
trap 'for g in $image_build $drills; do kill -- "-$g" 2>/dev/null || true; done' EXIT

prepare_machine start_image_build
bash "$ROOT/infra/test-services.sh"
bash "$ROOT/infra/test-server.sh" >/dev/null # the time-skipping server of test/workflow
bash "$ROOT/infra/temporal-pg.sh" build      # Temporal on PostgreSQL: test/temporal-pg, multi-host, deployment-run
step "type check, lint, format"
npx tsc --noEmit
npx eslint .
npx prettier --check . >/dev/null || { npx prettier --check .; exit 1; }
if [ $# -gt 0 ]; then
  await_image
  npx jest --runInBand "$@"
  exit
fi
bash "$ROOT/infra/load-check.sh" "${DRYDOCK_LOAD_ROUNDS:-1}"
await_image
if [ "${DRYDOCK_E2E_LANES:-2}" = 1 ]; then
  step "end-to-end tests and fault drills: real Temporal dev server, Docker and git"
  exec npx jest --selectProjects e2e drills --runInBand
fi
# The fault drills mostly wait out heartbeat and host timeouts: they run beside the other
# suites, in a jest of their own (its own dev server and PostgreSQL), their output kept until the end.
drills_log="$DATA_DIR/test-drills.log"
step "end-to-end tests: real Temporal dev server, Docker and git; the fault drills beside them (log: ${drills_log#"$ROOT/"})"
setsid npx jest --selectProjects drills --runInBand >"$drills_log" 2>&1 &
drills=$!
code=0
npx jest --selectProjects e2e --runInBand || code=$?
drills_code=0
wait "$drills" || drills_code=$?
drills=
step "the fault drills, run beside the suites above:"
cat "$drills_log" >&2
[ "$code" -eq 0 ] && [ "$drills_code" -eq 0 ] || fail "end-to-end tests failed (e2e: exit $code, drills: exit $drills_code)"
