#!/usr/bin/env bash
# Makes sure a Docker engine answers: the running one (DOCKER_HOST or the
# default socket), else on Debian as root installs docker.io and starts dockerd.
# Our own dockerd runs without the default bridge: sandboxes use
# '--network none' and drydock never uses bridge networks.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# The base image build needs debootstrap when debian:trixie-slim cannot be pulled;
# the sandbox helpers carry the host's C runtime, which patchelf points them at.
ensure_debootstrap() {
  if ! command -v debootstrap >/dev/null && ! docker image inspect debian:trixie-slim >/dev/null 2>&1 && is_debian_root; then
    apt_install debootstrap
  fi
  if ! command -v patchelf >/dev/null && is_debian_root; then apt_install patchelf; fi
}
# gVisor registered as the runtime "runsc" (a reload of a running engine, never a restart).
if docker info >/dev/null 2>&1; then bash "$ROOT/infra/runsc.sh"; bash "$ROOT/infra/builder-runtime.sh"; ensure_debootstrap; exit 0; fi
if [ -n "${DOCKER_HOST:-}" ]; then fail "DOCKER_HOST=$DOCKER_HOST does not answer"; fi
is_debian_root || fail "no Docker engine answers and this is not Debian as root: install Docker and start it (or set DOCKER_HOST)"
command -v dockerd >/dev/null || apt_install docker.io
bash "$ROOT/infra/runsc.sh"
bash "$ROOT/infra/builder-runtime.sh"
drop_stale_pidfile /var/run/docker.pid 'dockerd --bridge=none --iptables=false'
drop_stale_pidfile /var/run/docker/containerd/containerd.pid /var/run/docker/containerd/
step "starting dockerd (log: $DATA_DIR/dockerd.log)"
mkdir -p "$DATA_DIR"
setsid nohup dockerd --bridge=none --iptables=false >"$DATA_DIR/dockerd.log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { ensure_debootstrap; exit 0; }
  sleep 1
done
fail "dockerd did not start within 60 s; see $DATA_DIR/dockerd.log"
