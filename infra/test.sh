#!/usr/bin/env bash
# npm test: gets what the suite needs (npm packages, Docker engine, Temporal
# CLI, Temporal's Java test server, PostgreSQL, Chromium, Kubernetes, Gitea), checks
# types, lint and format, then runs the suites in three lanes against the real
# services. The longest first-run builds (the sandbox image, Kubernetes, Gitea) run in
# the background meanwhile. Extra arguments go to jest instead (e.g. npm test --
# test/unit).
#
# Each lane's output goes to data/test-<lane>.log; the terminal gets a line per
# test file as it ends, and at the end (also on failure or at the deadline) a
# summary: the failing tests, the slowest files, every step with its minute.
# DRYDOCK_TEST_DEADLINE_MIN (CI sets it): the run stops there, saying what was running.
set -euo pipefail
export DRYDOCK_T0=${DRYDOCK_T0:-$(date +%s)}
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
mkdir -p "$DATA_DIR"
# Every step line of the run (this script's and the installers'), printed again at the end:
# a CI log that keeps only its last lines still says where the minutes went.
export DRYDOCK_STEPS_LOG="$DATA_DIR/test-steps.log"
: >"$DRYDOCK_STEPS_LOG"

# First-run builds in the background, from the moment they can start; the tests wait for them.
declare -A job_pid=()
start_job() {
  local name=$1
  shift
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

# A lane: jest runs one after another in the background, output in data/test-<lane>.log.
declare -A lane_pid=()
lane_log() { echo "$DATA_DIR/test-$1.log"; }
start_lane() {
  local name=$1 log
  shift
  log=$(lane_log "$name")
  step "lane $name (log: ${log#"$ROOT/"})"
  printf '+ %s\n' "$*" >"$log"
  setsid env -u DRYDOCK_STEPS_LOG bash -c "$*" >>"$log" 2>&1 &
  lane_pid[$name]=$!
  # A line per test file as it ends (jest's PASS/FAIL line with its project, not the failures'
  # summary's repeat of it, with the lane and the minute).
  tail -n +1 -F --pid="${lane_pid[$name]}" "$log" 2>/dev/null |
    while IFS= read -r line; do
      case $line in "PASS "*" test/"* | "FAIL "*" test/"*) printf '    [%sm] %s: %s\n' "$((($(date +%s) - DRYDOCK_T0) / 60))" "$name" "$line" >&2 ;; esac
    done &
}
# The file a lane is in: its last START line (test/support/progress-reporter.mjs) without an end.
running_file() {
  local log started
  log=$(lane_log "$1")
  started=$(grep -E '^START ' "$log" | tail -1 | cut -d' ' -f2-)
  [ -n "$started" ] && ! grep -qE "^(PASS|FAIL) +${started}" "$log" && echo "$started"
}
# A lane's outcome once it has ended: passed or failed. One still running is stopped, and
# its outcome names the test file it was in.
declare -A lane_result=()
end_lane() {
  local name=$1 pid=${lane_pid[$1]}
  if kill -0 "$pid" 2>/dev/null && [ "${2:-}" = stop ]; then
    lane_result[$name]="stopped in $(running_file "$name" || echo 'no test file (between jest runs)')"
    kill -- "-$pid" 2>/dev/null
  elif wait "$pid"; then lane_result[$name]=passed; else lane_result[$name]=failed; fi
  unset "lane_pid[$name]"
}

# Each failing file and test with the first lines of its error and the test's line that threw,
# without colours, code frames or other stack lines (the lane's log has them): short enough for
# a runner that shows only the end of the output. Read where jest prints them, after each FAIL
# line: its "Summary of all failing tests" (skipped here, it repeats them) comes only for runs
# of more than 20 files, and a lane runs the drills' five in a jest of their own.
failures() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    /Summary of all failing tests/ { skip = 1; next }
    /^Test Suites:/ { skip = 0; infile = 0; next }
    skip { next }
    /^(PASS|START) / { infile = 0; left = 0; next }
    /^FAIL / { print; infile = 1; left = 0; next }
    !infile { next }
    /^  ● Console/ { left = 0; where = 0; next }
    /^  ● / { print; left = 12; where = 1; next }
    where && $1 == "at" && /test\// && !/node_modules/ { print; where = 0; next }
    left > 0 && NF > 0 && $1 != "at" && $1 !~ /^[0-9>|]/ { print; left-- }'
}
summary() {
  local name log found
  for name in "${!lane_result[@]}"; do
    log=$(lane_log "$name")
    case ${lane_result[$name]} in
      passed) ;;
      failed)
        printf '\nlane %s failed; what failed (whole log: %s):\n' "$name" "${log#"$ROOT/"}" >&2
        found=$(failures "$log" | head -60)
        if [ -n "$found" ]; then echo "$found" >&2; else tail -60 "$log" >&2; fi
        ;;
      *)
        # A lane stopped at the deadline may have failed before: what failed first, then where it stopped.
        found=$(failures "$log" | head -40)
        [ -z "$found" ] || printf '\nlane %s failed before it was stopped; what failed:\n%s\n' "$name" "$found" >&2
        printf '\nlane %s %s; the end of its log (%s):\n' "$name" "${lane_result[$name]}" "${log#"$ROOT/"}" >&2 && tail -40 "$log" >&2
        ;;
    esac
  done
  for name in "${!lane_result[@]}"; do
    awk -v lane="$name" '/^slowest test files/ { on = 1 } on && /^$/ { on = 0 } on { print lane ": " $0 }' "$(lane_log "$name")" >&2
  done
}
on_exit() {
  local code=$? g
  set +e
  for g in "${!lane_pid[@]}"; do end_lane "$g" stop; done
  for g in "${job_pid[@]}"; do kill -- "-$g" 2>/dev/null; done
  [ -z "${deadline_pid:-}" ] || { pkill -P "$deadline_pid"; kill "$deadline_pid"; } 2>/dev/null
  [ ${#lane_result[@]} -eq 0 ] || summary
  if [ ${#lane_result[@]} -gt 0 ] || [ "$code" != 0 ]; then
    printf '\nsteps of this run:\n' >&2
    sed 's/^/  /' "$DRYDOCK_STEPS_LOG" >&2
    for g in "${!lane_result[@]}"; do
      printf '  lane %s: %s\n' "$g" "${lane_result[$g]}" >&2
      # With the first lines of each error: a runner that keeps only the output's two ends keeps these.
      [ "${lane_result[$g]}" = passed ] || failures "$(lane_log "$g")" | head -30 | sed 's/^/    /' >&2
    done
  fi
  step "disk: $(df -h --output=avail / | tail -1 | tr -d ' ') free at the end"
}
trap on_exit EXIT
trap 'exit 130' INT TERM # Ctrl-C, or a runner's stop: the lanes are ended and the summary printed
deadline() {
  step "deadline: ${DRYDOCK_TEST_DEADLINE_MIN} min reached (DRYDOCK_TEST_DEADLINE_MIN); stopping"
  exit 124
}
trap deadline USR1
# The timer is ended with the run (on_exit): it must not hold the output a runner reads to its end.
deadline_pid=
if [ -n "${DRYDOCK_TEST_DEADLINE_MIN:-}" ]; then
  (sleep $((DRYDOCK_TEST_DEADLINE_MIN * 60 - ($(date +%s) - DRYDOCK_T0))) && kill -USR1 $$) >/dev/null 2>&1 &
  deadline_pid=$!
fi
# A first run needs about 20 GB (images, the Kubernetes build and its Go caches, clusters).
step "disk: $(df -h --output=avail / | tail -1 | tr -d ' ') free at the start"

# Kubernetes for test/e2e/k8s-* and Gitea for test/e2e/gitea-*, from Go modules (54 and 31
# minutes on a fresh 2-core machine beside the load neighbour, nothing once .tools holds them):
# from the first second, beside the installs, whose downloads and waits leave CPU over (at nice
# 10 they take what the rest leaves). Kubernetes' own apt installs (etcd, containerd) come
# after its build, one apt at a time (lib.sh). Their suites run last and wait for them.
start_job kubernetes bash "$ROOT/infra/k8s-cluster.sh" build
start_job gitea bash "$ROOT/infra/gitea.sh"
# Temporal's test server (the time-skipping server of test/workflow; Maven and javac, about a
# minute the first time) needs neither npm nor Docker: from the first second too. (The Temporal
# CLI's build, the longest wait before the lanes on a fresh machine, stays after the installs:
# started at the first second beside them and the other Go builds, it took 12 minutes in a
# fresh machine's run, against 9 after them: docs/testing.md.)
start_job test-server bash "$ROOT/infra/test-server.sh"
# The sandbox image needs only Docker and the network.
prepare_machine start_job sandbox-image npx tsx sandbox-images/base-image.ts
# The service images (PostgreSQL, Redis: Debian's packages) once the sandbox image's job has
# Debian's image: 2 to 3 minutes of test/e2e/services on a fresh machine otherwise. Best
# effort: a suite builds what is missing itself, and fails there if it cannot.
start_job service-images bash -c "image_job=${job_pid[sandbox-image]:-}
  while [ -n \"\$image_job\" ] && kill -0 \"\$image_job\" 2>/dev/null; do sleep 5; done
  npx tsx sandbox-images/service-images.ts || echo 'the suites build the service images instead' >&2"
bash "$ROOT/infra/test-services.sh"
# code-server (VS Code in the browser) from npm and Debian for test/e2e/editor-install (7 minutes the
# first time on a busy machine, cached in .tools/code-server).
start_job code-server bash "$ROOT/infra/code-server.sh"
bash "$ROOT/infra/temporal-pg.sh" build # Temporal on PostgreSQL: test/temporal-pg, multi-host, deployment-run
# The deployment's images (infra/images.sh), which test/e2e/deployment-run and k8s-deployment
# use: built from empty caches they took 3 to 4 minutes of the first lane on a fresh machine,
# seconds once Docker's layer cache holds them. Once the sandbox image's job has Debian's
# image (the engine runs the build's steps, so `nice` would not slow them); best effort, as the
# service images: the suites build what is missing.
start_job deployment-images bash -c "image_job=${job_pid[sandbox-image]:-}
  while [ -n \"\$image_job\" ] && kill -0 \"\$image_job\" 2>/dev/null; do sleep 5; done
  bash '$ROOT/infra/images.sh' >/dev/null || echo 'the suites build the deployment images instead' >&2"
checks='npx tsc --noEmit && npx eslint . && { npx prettier --check . >/dev/null || { npx prettier --check .; exit 1; }; }'
if [ $# -gt 0 ]; then
  step "type check, lint, format"
  bash -c "$checks"
  await_jobs
  npx jest --runInBand "$@"
  exit
fi

# Three lanes, each jest with its own dev server and PostgreSQL (and temp folder: one jest
# cannot give its workers folders of their own, docs/testing.md). The first: the end-to-end
# suites, the heaviest first (image builds in gVisor, several workers), then the rest,
# Gitea's and Kubernetes' last (test/support/kubernetes-last.mjs). The second, beside it: the
# fast suite (under the load of the other lanes and the builds), then the light end-to-end
# files (--shard 2/3: kubernetes-last.mjs's SECOND_LANE, scripted sessions without builds in
# gVisor or a browser), so two heavy files never run at once. The third: the fault drills,
# which mostly wait out heartbeat and host timeouts (443 CPU-seconds in 31 minutes under load,
# docs/testing.md): 900 s of a lane's wall time quiet, up to 2,240 under load, then more light
# files (--shard 3/3: THIRD_LANE), so the three lanes end at about the same time. (A third
# lane of heavy files, the e2e project in two halves, overloaded 2 cores: sessions ran out of
# their budgets and connections to a busy dev server timed out.) Each jest of a lane runs whatever the one before it did; the suites that
# start sandboxes wait for the sandbox image.
# The checks (types, lint, format) are a lane too: one to three minutes of a busy machine that
# no test waits for. A failure stops the run once they end, the lanes' tests with it.
start_lane checks "$checks"
wait_image=true
[ -z "${job_pid[sandbox-image]:-}" ] || wait_image="while kill -0 ${job_pid[sandbox-image]} 2>/dev/null; do sleep 5; done"
await_jobs test-server
start_lane fast-e2e "s=0; npx jest --selectProjects fast || s=1; $wait_image
  npx jest --selectProjects e2e --runInBand --shard 2/3 || s=1; exit \$s"
await_jobs sandbox-image
start_lane e2e "npx jest --selectProjects e2e --runInBand --shard 1/3"
start_lane drills-e2e "s=0; npx jest --selectProjects drills --runInBand || s=1
  npx jest --selectProjects e2e --runInBand --shard 3/3 || s=1; exit \$s"
end_lane checks
[ "${lane_result[checks]}" = passed ] || fail "the type check, lint or format failed (log: ${DATA_DIR#"$ROOT/"}/test-checks.log)"
for name in "${!lane_pid[@]}"; do end_lane "$name"; done
await_jobs # Kubernetes: long done when its suites ran; a failed build is told here too
failed=$(for name in "${!lane_result[@]}"; do [ "${lane_result[$name]}" = passed ] || echo "$name"; done)
[ -z "$failed" ] || fail "tests failed in: $(echo $failed)"
