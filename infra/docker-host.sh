#!/usr/bin/env bash
# infra/docker-host.sh NAME: one more Docker engine on this machine, as a
# second Docker host would be: its own socket, data root, exec root and
# containerd (started by it). Idempotent; prints its DOCKER_HOST. The
# multi-host drills (test/e2e/faults.test.ts) and snapshot tests use it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
name=${1:?usage: infra/docker-host.sh NAME}
[[ $name =~ ^[a-z0-9-]{1,20}$ ]] || fail "NAME: lower-case letters, digits and '-' (up to 20)"
# Outside the project (like /var/lib/docker): tools that walk the tree must not find its images.
dir="/var/lib/drydock-hosts/$name"
# The exec root holds containerd's sockets: keep its path short.
exec_root="/run/drydock-$name"
sock="/run/drydock-$name.sock"
export DOCKER_HOST="unix://$sock"
if docker info >/dev/null 2>&1; then echo "$DOCKER_HOST"; exit 0; fi
is_debian_root || fail "starting another dockerd needs root on Debian"
command -v dockerd >/dev/null || apt_install docker.io
mkdir -p "$dir/root" "$exec_root"
step "starting Docker host '$name' (log: $dir/dockerd.log)"
# It outlives the test run that starts it, whose TMPDIR is removed at the run's end: runc
# writes each exec's process file there, so an inherited one fails every later exec.
env -u TMPDIR setsid nohup dockerd --host "$DOCKER_HOST" --data-root "$dir/root" --exec-root "$exec_root" \
  --pidfile "$dir/dockerd.pid" --bridge=none --iptables=false --ip-masq=false >"$dir/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { echo "$DOCKER_HOST"; exit 0; }
  sleep 1
done
fail "dockerd '$name' did not start within 60 s; see $dir/dockerd.log"
