#!/usr/bin/env bash
# gVisor for sandboxes (DRYDOCK_DOCKER_RUNTIME=runsc): installs Debian's runsc
# and registers it with the Docker engine as the runtime "runsc", then makes a
# running dockerd reload its configuration (SIGHUP: runtimes are reloadable, so
# nothing running is restarted). Idempotent; does nothing where it cannot
# (not Debian as root, or an engine that is not ours to configure).
#   --host-uds=open  a sandbox may connect to the unix sockets mounted into it
#                    (the egress proxy's and the model gateway's), never create them
#   --network=host   gVisor uses the container's own network namespace (loopback
#                    only, Docker's "none"), so the sandbox, its services and its
#                    browser share one loopback; each gVisor sandbox would
#                    otherwise have a loopback of its own
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CONFIG=${DRYDOCK_DOCKER_CONFIG:-/etc/docker/daemon.json}
is_debian_root || exit 0
command -v runsc >/dev/null || apt_install runsc
mkdir -p "$(dirname "$CONFIG")"
changed=$(node - "$CONFIG" "$(command -v runsc)" <<'JS'
const fs = require('node:fs');
const [file, runsc] = process.argv.slice(2);
const config = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8') || '{}') : {};
const want = { path: runsc, runtimeArgs: ['--host-uds=open', '--network=host'] };
config.runtimes ??= {};
if (JSON.stringify(config.runtimes.runsc) === JSON.stringify(want)) { console.log('no'); process.exit(0); }
config.runtimes.runsc = want;
fs.writeFileSync(file, JSON.stringify(config, null, 2) + '\n');
console.log('yes');
JS
)
# A running engine started from this machine's default pid file picks the runtime up on a reload.
pid=$(cat /var/run/docker.pid 2>/dev/null || true)
if [ "$changed" = yes ] && [ -z "${DOCKER_HOST:-}" ] && [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
  step "registering the runsc runtime with dockerd (a configuration reload)"
  kill -HUP "$pid"
  for _ in $(seq 1 20); do
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && exit 0
    sleep 0.5
  done
  fail "dockerd did not pick up the runsc runtime; see its log"
fi
