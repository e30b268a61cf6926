#!/usr/bin/env bash
# infra/docker-host.sh NAME: one more Docker engine on this machine, as a
# second Docker host would be: its own socket, data root, exec root and
# containerd (started by it). Idempotent; prints its DOCKER_HOST. The
# multi-host tests (test/support/docker-hosts.ts) and the chaos soak use it.
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
# kill -0 would find a dockerd that exited as a zombie (nobody waits for it here).
dockerd_alive() {
  local state
  state=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) && [ "$state" != Z ]
}
log_tail() { printf '%s\n' "the end of $dir/dockerd.log:" && tail -n 15 "$dir/dockerd.log" | sed 's/^/  /'; }
# A dockerd of this engine that does not answer yet is waited for; else one is started.
drop_stale_pidfile "$dir/dockerd.pid" "--data-root $dir/root"
drop_stale_pidfile "$exec_root/containerd/containerd.pid" "$exec_root/containerd/"
pid=$(cat "$dir/dockerd.pid" 2>/dev/null || true)
if [ -n "$pid" ]; then
  step "waiting for Docker host '$name' (log: $dir/dockerd.log)"
else
  step "starting Docker host '$name' (log: $dir/dockerd.log)"
  # It outlives the test run that starts it, whose TMPDIR is removed at the run's end: runc
  # writes each exec's process file there, so an inherited one fails every later exec.
  env -u TMPDIR setsid nohup dockerd --host "$DOCKER_HOST" --data-root "$dir/root" --exec-root "$exec_root" \
    --pidfile "$dir/dockerd.pid" --bridge=none --iptables=false --ip-masq=false >"$dir/dockerd.log" 2>&1 </dev/null &
  pid=$!
fi
# One that exits while starting fails at once, with its reason; one that lives but does not
# answer is waited for up to 3 minutes (a loaded machine), with a line every 30 s.
started=$SECONDS report_at=30
until docker info >/dev/null 2>&1; do
  dockerd_alive || fail "dockerd '$name' exited while starting; $(log_tail)"
  waited=$((SECONDS - started))
  [ "$waited" -lt 180 ] || fail "dockerd '$name' did not answer within 180 s; $(log_tail)"
  if [ "$waited" -ge "$report_at" ]; then
    step "dockerd '$name' still starting after $waited s"
    report_at=$((report_at + 30))
  fi
  sleep 1
done
echo "$DOCKER_HOST"
