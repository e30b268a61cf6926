#!/usr/bin/env bash
# gVisor for the isolated builder (sandbox/builder.ts): the runtime
# "runsc-builder", a newer runsc than bookworm's. The builder runs buildah as
# root inside gVisor, and buildah makes its mounts private (MS_REC|MS_PRIVATE)
# and its RUN steps' chroots with bind mounts: bookworm's runsc (20221219)
# refuses the first ("remount /, flags: 0x44000: invalid argument"); trixie's
# (20240729, a static binary) has them. Fetched with apt from Debian's trixie
# archive into a folder of its own (the machine's sources are not touched),
# installed at /usr/local/lib/drydock/runsc-builder, registered with the
# engine as its own runtime (a configuration reload, never a restart; the
# "runsc" of sessions stays as it is). Idempotent; does nothing where it
# cannot (not Debian as root, or an engine that is not ours to configure).
#   --host-uds=open  the builder connects to the egress proxy's socket mounted into it
#   --network=host   gVisor uses the container's network namespace: loopback only (Docker's "none")
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CONFIG=${DRYDOCK_DOCKER_CONFIG:-/etc/docker/daemon.json}
BIN=/usr/local/lib/drydock/runsc-builder
is_debian_root || exit 0
if [ ! -x "$BIN" ]; then
  step "fetching gVisor (runsc) from Debian trixie for the isolated builder"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/cache"
  echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main' >"$work/sources.list"
  opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq >&2 || fail "apt-get update of Debian trixie's list failed"
  (cd "$work" && apt-get "${opts[@]}" download runsc >&2) || fail "apt-get download runsc (trixie) failed"
  dpkg-deb -x "$work"/runsc_*.deb "$work/root"
  mkdir -p "$(dirname "$BIN")"
  install -m 0755 "$work/root/usr/bin/runsc" "$BIN"
fi
changed=$(node - "$CONFIG" "$BIN" <<'JS'
const fs = require('node:fs');
const [file, runsc] = process.argv.slice(2);
const config = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8') || '{}') : {};
const want = { path: runsc, runtimeArgs: ['--host-uds=open', '--network=host'] };
config.runtimes ??= {};
if (JSON.stringify(config.runtimes['runsc-builder']) === JSON.stringify(want)) { console.log('no'); process.exit(0); }
config.runtimes['runsc-builder'] = want;
fs.writeFileSync(file, JSON.stringify(config, null, 2) + '\n');
console.log('yes');
JS
)
pid=$(cat /var/run/docker.pid 2>/dev/null || true)
if [ "$changed" = yes ] && [ -z "${DOCKER_HOST:-}" ] && [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
  step "registering the runsc-builder runtime with dockerd (a configuration reload)"
  kill -HUP "$pid"
  for _ in $(seq 1 20); do
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc-builder"' && exit 0
    sleep 0.5
  done
  fail "dockerd did not pick up the runsc-builder runtime; see its log"
fi
