#!/usr/bin/env bash
# npm test: gets what the suite needs (npm packages, Docker engine, Temporal
# CLI, Temporal's Java test server, PostgreSQL, Chromium, Kubernetes), checks
# types, lint and format, then runs the end-to-end suites against the real
# services with the fast suite and the fault drills beside them. The longest
# first-run builds (the sandbox image, Kubernetes) run in the background
# meanwhile. Extra arguments go to jest instead (e.g. npm test -- test/unit).
set -euo pipefail
export DRYDOCK_T0=${DRYDOCK_T0:-$(date +%s)}
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

# First-run builds in the background, from the moment they can start; the end-to-end tests
# wait for them. Each job's progress goes to data/<name>.log.
declare -A job_pid=()
start_job() {
  local name=$1
  shift
  mkdir -p "$DATA_DIR"
  step "$name in the background if it is missing (log: ${DATA_DIR#"$ROOT/"}/$name.log)"
  setsid "$@" >/dev/null 2>"$DATA_DIR/$name.log" &
  job_pid[$name]=$!
}
# await_jobs [NAME...]: the jobs named (those started), or all.
await_jobs() {
  local name names=("$@")
  [ $# -gt 0 ] || names=("${!job_pid[@]}")
  for name in "${names[@]}"; do
    [ -n "${job_pid[$name]:-}" ] || continue
    wait "${job_pid[$name]}" || { tail -30 "$DATA_DIR/$name.log" >&2; fail "$name failed (log: $DATA_DIR/$name.log)"; }
    unset "job_pid[$name]"
  done
}
declare -A lane_pid=()
# Free disk at the start and the end: a run needs about 25 GB (images, the Kubernetes build, clusters).
disk_free() { step "disk: $(df -h --output=avail / | tail -1 | tr -d ' ') free $1"; }
disk_free "at the start"
trap 'for g in "${job_pid[@]}" "${lane_pid[@]}"; do kill -- "-$g" 2>/dev/null || true; done; disk_free "at the end"' EXIT

# The sandbox image needs only Docker and the network.
prepare_machine start_job sandbox-image npx tsx sandbox-images/base-image.ts
bash "$ROOT/infra/test-services.sh"
bash "$ROOT/infra/test-server.sh" >/dev/null # the time-skipping server of test/workflow
# Kubernetes for test/e2e/k8s-* (20 to 45 min the first time, overlapping the other end-to-end suites);
# after the other apt installs (its own installs etcd and containerd: one apt at a time).
start_job kubernetes bash "$ROOT/infra/k8s-cluster.sh" build
bash "$ROOT/infra/temporal-pg.sh" build # Temporal on PostgreSQL: test/temporal-pg, multi-host, deployment-run
step "type check, lint, format"
npx tsc --noEmit
npx eslint .
npx prettier --check . >/dev/null || { npx prettier --check .; exit 1; }
if [ $# -gt 0 ]; then
  await_jobs
  npx jest --runInBand "$@"
  exit
fi
# Two lanes, each a jest of its own (its own dev server and PostgreSQL): the end-to-end
# suites, and beside them the fast suite (under the load of the other lane and the builds:
# what the load check proves with CPU burners, npm run test:load), then the fault drills,
# which mostly wait out heartbeat and host timeouts. (A third lane, the end-to-end suites in
# two halves, overloaded 2 cores: sessions ran out of their budgets.) The second lane's
# output is kept in its log and printed at the end.
image_pid=${job_pid[sandbox-image]:-}
fast_then_drills() {
  npx jest --selectProjects fast || return
  # The drills' global setup would build the sandbox image itself: wait for the job building it.
  while [ -n "$image_pid" ] && kill -0 "$image_pid" 2>/dev/null; do sleep 5; done
  npx jest --selectProjects drills --runInBand
}
lane_log="$DATA_DIR/test-fast-and-drills.log"
step "the fast suite, then the fault drills, beside the end-to-end tests (log: ${lane_log#"$ROOT/"})"
setsid bash -c "$(declare -f fast_then_drills); image_pid=$image_pid; fast_then_drills" >"$lane_log" 2>&1 &
lane_pid[fast-and-drills]=$!
await_jobs sandbox-image # Kubernetes not: its suites run last and wait for its build themselves
step "end-to-end tests: real Temporal dev server, Docker and git"
failed=()
npx jest --selectProjects e2e --runInBand || failed+=(e2e)
wait "${lane_pid[fast-and-drills]}" || failed+=(fast-and-drills)
unset "lane_pid[fast-and-drills]"
step "the fast suite and the fault drills, run beside the suites above:"
cat "$lane_log" >&2
await_jobs # Kubernetes: long done when its suites ran; a failed build is told here too
[ ${#failed[@]} -eq 0 ] || fail "tests failed in: ${failed[*]}"
