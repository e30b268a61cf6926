#!/usr/bin/env bash
# A realistic neighbour for the load check (and for a .ci/run beside it): the kind of
# work a developer's machine or a shared CI runner has besides our tests.
#  - containers: small ones started and removed over and over (`docker run --rm`, and
#    `docker create`/`start`/`rm`), from an image already on the machine (the sandbox base
#    image drydock builds, else debian:trixie-slim; never pulled), no network;
#  - a project: a clone of drydock's own git repository (never fetched from anywhere else)
#    and `npm ci` of it through the npm registry (its own npm cache: the first round
#    downloads, the later ones unpack; no install scripts), again and again.
# It stops by itself after SECONDS (default 3600), or at INT/TERM, and leaves nothing: its
# containers carry the label drydock.load-neighbour=<run> and are removed by it, its folder
# is deleted. Each loop's count is printed when it stops.
#
#   bash infra/load-neighbour.sh [seconds]      (also: bash infra/load-check.sh neighbour [seconds])
#
# It runs in a process group of its own (its id is the group's): `kill -TERM -- -<pid>` ends
# it and everything it started, and it cleans up.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECONDS_LEFT=${1:-3600}
[[ "$SECONDS_LEFT" =~ ^[1-9][0-9]*$ ]] || fail "neighbour: seconds must be a positive number, not '$SECONDS_LEFT'"
# A group of its own, so that a stop reaches the docker, git and npm processes it started.
if [ "$(ps -o pgid= -p $$ | tr -d ' ')" != "$$" ]; then exec setsid bash "$0" "$@"; fi

RUN_LABEL="drydock.load-neighbour=$$-$(date +%s)"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/drydock-neighbour.XXXXXX")
image=$(docker images --filter label=drydock.image=base --format '{{.Repository}}:{{.Tag}}' | head -n 1)
[ -n "$image" ] || image=debian:trixie-slim
docker image inspect "$image" >/dev/null 2>&1 \
  || fail "neighbour: no image to run: build the sandbox base image first (npx tsx sandbox-images/base-image.ts)"
repo=$(cd "$ROOT" && cd "$(git rev-parse --git-common-dir)" && pwd)

# Removes what this neighbour made: its containers (by label) and its folder. Runs once.
cleaned=
cleanup() {
  [ -z "$cleaned" ] || return 0
  cleaned=1
  trap '' INT TERM
  # The whole group (loops, docker clients, git, npm), not this shell: it still has to clean.
  kill -TERM -- "-$$" 2>/dev/null || true
  # Every process of the group, not only this shell's children: npm ci takes its time over a
  # TERM (half a minute was seen), so what is left after 10 s is killed.
  local found p others=() until=$((SECONDS + 10))
  while :; do
    found=$(pgrep -g $$) || true # a lone command: its subshell is pgrep itself, which pgrep leaves out
    others=()
    for p in $found; do [ "$p" = $$ ] || others+=("$p"); done
    [ ${#others[@]} -gt 0 ] && [ "$SECONDS" -lt "$until" ] || break
    sleep 0.2
  done
  [ ${#others[@]} -eq 0 ] || kill -KILL "${others[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  local left
  left=$(docker ps -aq --filter "label=$RUN_LABEL")
  [ -z "$left" ] || docker rm -f $left >/dev/null 2>&1 || true
  for f in "$scratch"/*.count; do [ -e "$f" ] && step "neighbour: $(basename "$f" .count) × $(cat "$f")"; done
  rm -rf "$scratch" || step "neighbour: could not remove all of $scratch"
  step "neighbour stopped; containers labelled $RUN_LABEL left: $(docker ps -aq --filter "label=$RUN_LABEL" | wc -l)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The containers: a short job removed by --rm, then one created, started, waited for and removed.
containers() {
  local n=0 name
  while :; do
    n=$((n + 1))
    docker run --rm --pull never --network none --label "$RUN_LABEL" "$image" \
      sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i + 1)); done; ls / >/dev/null' >/dev/null 2>&1 || true
    name="drydock-neighbour-$$-$n"
    docker create --pull never --network none --label "$RUN_LABEL" --name "$name" "$image" \
      sh -c 'head -c 4000000 /dev/urandom | sha256sum >/dev/null' >/dev/null 2>&1 || true
    docker start -a "$name" >/dev/null 2>&1 || true
    docker rm -f "$name" >/dev/null 2>&1 || true
    echo "$n" >"$scratch/containers run and removed.count"
  done
}

# The project: a clone (through git's pack protocol, as from a remote) and npm ci, then gone.
project() {
  local n=0
  mkdir -p "$scratch/npm-cache"
  while :; do
    n=$((n + 1))
    rm -rf "$scratch/clone"
    git clone --quiet --no-local "$repo" "$scratch/clone" || { step "neighbour: git clone of $repo failed"; exit 1; }
    (cd "$scratch/clone" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
      --cache "$scratch/npm-cache" >/dev/null) || { step "neighbour: npm ci failed (is the npm registry reachable?)"; exit 1; }
    echo "$n" >"$scratch/git clone + npm ci.count"
  done
}

step "neighbour for ${SECONDS_LEFT} s: containers of $image (label $RUN_LABEL), git clone + npm ci of $repo (pid $$)"
containers &
project &
sleep "$SECONDS_LEFT" &
# The time is up, or a loop failed (it said why): either way everything stops and is removed.
wait -n && exit 0
exit 1
