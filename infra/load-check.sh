#!/usr/bin/env bash
# The fast suite (test/unit and test/workflow) under load: it runs ROUNDS times
# in a row while one CPU burner per core, a disk writer (256 MiB files, fsync'd,
# over and over) and a realistic neighbour (infra/load-neighbour.sh: small
# containers started and removed, a git clone and npm ci of a real project, over
# and over; DRYDOCK_LOAD_NEIGHBOUR=0 leaves it out) keep the machine busy. A round that fails, or runs
# past DRYDOCK_LOAD_ROUND_LIMIT_S (default 1800 s: a hang), fails the check.
# Each round's jest output is kept in data/load-check/round-<n>.log; a table of
# the rounds (time, outcome, jest's counts) is printed at the end.
#
#   bash infra/load-check.sh [rounds] [jest arguments...]    (default: 10 rounds)
#   npm run test:load -- 3
#   bash infra/load-check.sh neighbour [seconds]   the neighbour alone (say, beside a .ci/run)
#
# npm test runs the fast suite beside its end-to-end suites instead: a load of its own.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if [ "${1:-}" = neighbour ]; then shift; exec bash "$ROOT/infra/load-neighbour.sh" "$@"; fi
cd "$ROOT"
ROUNDS=${1:-10}
shift || true
LIMIT_S=${DRYDOCK_LOAD_ROUND_LIMIT_S:-1800}
LOGS="$DATA_DIR/load-check"
mkdir -p "$LOGS"
bash "$ROOT/infra/test-server.sh" >/dev/null

# The load: plain processes, ended by their ids (the disk writer ends its dd too).
load=()
round_pid=
scratch=$(mktemp -d)
stop_load() {
  # timeout relays the signal to the round's whole process group.
  [ -z "$round_pid" ] || kill "$round_pid" 2>/dev/null || true
  for pid in "${load[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$scratch"
}
trap stop_load EXIT
trap 'exit 130' INT TERM
cores=$(nproc)
for _ in $(seq "$cores"); do
  sh -c 'while :; do :; done' &
  load+=($!)
done
sh -c 'trap "kill \$dd 2>/dev/null; exit" TERM
  while :; do
    dd if=/dev/zero of="$1/load" bs=1M count=256 conv=fsync status=none & dd=$!
    wait $dd; rm -f "$1/load"
  done' sh "$scratch" &
load+=($!)
neighbour=
if [ "${DRYDOCK_LOAD_NEIGHBOUR:-1}" != 0 ]; then
  # Bounded by the rounds' limit; ended (and cleaned up by itself) with the rest of the load.
  bash "$ROOT/infra/load-neighbour.sh" $((ROUNDS * LIMIT_S)) &
  load+=($!)
  neighbour=" and a neighbour (containers, git clone + npm ci)"
fi
step "fast suite × $ROUNDS beside $cores CPU burners, a disk writer$neighbour (logs: ${LOGS#"$ROOT/"})"

failed=0
rows=()
for n in $(seq "$ROUNDS"); do
  log="$LOGS/round-$n.log"
  start=$SECONDS
  code=0
  # timeout signals jest's whole process group: a hung round ends with what it started (the test servers).
  timeout -k 10 "$LIMIT_S" npx jest --selectProjects fast "$@" >"$log" 2>&1 &
  round_pid=$!
  wait "$round_pid" || code=$?
  round_pid=
  secs=$((SECONDS - start))
  counts=$(sed -n 's/\x1b\[[0-9;]*m//g; s/^Tests: *//p' "$log" | tail -1)
  case $code in
    0) outcome=pass ;;
    124 | 137) outcome="HUNG (stopped after ${LIMIT_S} s)" ;;
    *) outcome="FAILED (exit $code)" ;;
  esac
  [ "$code" -eq 0 ] || failed=$((failed + 1))
  rows+=("$(printf 'round %2d  %4d s  %-28s %s' "$n" "$secs" "$outcome" "$counts")")
  step "${rows[-1]}"
done
printf '%s\n' "fast suite under load ($cores CPU burners + disk writer${neighbour:+ + neighbour}, $(date -u +%FT%TZ)):" "${rows[@]}" >&2
[ "$failed" -eq 0 ] || fail "$failed of $ROUNDS rounds failed: see ${LOGS#"$ROOT/"}/round-<n>.log"
