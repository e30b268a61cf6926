# Shared helpers for the infra scripts: progress lines on stderr, and the
# project-local folders (git-ignored) where tools and state live.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR="$ROOT/.tools"
DATA_DIR="${DRYDOCK_DATA_DIR:-$ROOT/data}"
# A step's line; under npm test, with the minutes since it started (DRYDOCK_T0), for CI's timings.
step() {
  local t=""
  [ -z "${DRYDOCK_T0:-}" ] || t="[$((($(date +%s) - DRYDOCK_T0) / 60))m] "
  printf '\033[1m==>\033[0m %s%s\n' "$t" "$*" >&2
  # npm test keeps every step line of its run, to print them again at its end.
  [ -z "${DRYDOCK_STEPS_LOG:-}" ] || printf '%s%s\n' "$t" "$*" >>"$DRYDOCK_STEPS_LOG"
}
fail() { printf 'drydock: %s\n' "$*" >&2; exit 1; }
# drop_stale_pidfile FILE MARK: removes FILE unless it names a live process whose command line
# holds MARK. /run is not a tmpfs on every machine: a daemon's pid file outlives a machine that
# went down with it running, and names another process once its pid is reused; dockerd then
# refuses to start ("pid file found"), or waits for a containerd that is not there.
drop_stale_pidfile() {
  local pid
  pid=$(head -n 1 "$1" 2>/dev/null | tr -dc '0-9') || true
  [ -n "$pid" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$2" || rm -f "$1"
}
is_debian_root() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
# apt's locks fail at once when held: by another install of this run (npm test's background
# builds install their packages at the same minute: code-server's ripgrep, the cluster's
# etcd-server) or by the machine's own apt timers. drydock's installs take turns, and each
# waits for another's apt (apt-get update does not wait for its lock: it is asked again).
apt_install() {
  step "installing $* with apt-get"
  (
    flock 9
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
      apt_update || fail "apt-get update failed"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >&2 \
      || fail "apt-get install $* failed"
  ) 9>/run/drydock-apt.lock || exit 1
}
apt_update() {
  local tries=0 err
  until err=$(apt-get update -qq 2>&1); do
    if ! grep -q 'Could not get lock' <<<"$err" || [ $((tries += 1)) -ge 120 ]; then
      echo "$err" >&2
      return 1
    fi
    sleep 5
  done
}

# The machine's cache of built tools, beside Go's and npm's: what a checkout builds into
# .tools is kept there under its stamp, and the next checkout on the machine (a fresh clone, a
# worktree) takes it as hard links instead of building it again: a warm CI run spent minutes
# of its two cores linking Kubernetes, Gitea and the Temporal binaries again and rebuilding
# code-server's native modules. DRYDOCK_TOOL_CACHE moves it; set empty, it is not used.
# The links share their files with the cache: a build removes a tool's old files before it
# writes (never over them), or it would change every checkout's copy.
TOOL_CACHE=${DRYDOCK_TOOL_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/drydock/tools}
tool_entry() { echo "$TOOL_CACHE/$1-$(printf '%s' "$2" | sha256sum | cut -c1-16)"; }
# tool_from_cache PATH NAME STAMP: PATH (a folder or file of .tools) made from the cache's
# NAME at STAMP; fails when the cache has none.
tool_from_cache() {
  local entry
  [ -n "$TOOL_CACHE" ] || return 1
  entry=$(tool_entry "$2" "$3")
  [ -e "$entry/t" ] || return 1
  rm -rf "$1" && mkdir -p "$(dirname "$1")"
  # Hard links where the cache shares the file system, a copy where it does not.
  cp -al "$entry/t" "$1" 2>/dev/null || { rm -rf "$1" && cp -a "$entry/t" "$1"; } || return 1
  touch "$entry"
  step "$2 from the machine's tool cache (${entry/#$HOME/\~})"
}
# tool_to_cache PATH NAME STAMP: keeps PATH as NAME at STAMP, once (a concurrent keeper's wins);
# NAME's other stamps unused for 14 days go.
tool_to_cache() {
  local entry tmp
  [ -n "$TOOL_CACHE" ] || return 0
  entry=$(tool_entry "$2" "$3")
  [ -e "$entry" ] && return 0
  mkdir -p "$TOOL_CACHE" && tmp=$(mktemp -d "$TOOL_CACHE/.new-XXXXXX") || return 0
  if cp -al "$1" "$tmp/t" 2>/dev/null || { rm -rf "$tmp/t" && cp -a "$1" "$tmp/t"; }; then
    mv -T "$tmp" "$entry" 2>/dev/null || rm -rf "$tmp"
  else
    rm -rf "$tmp"
  fi
  find "$TOOL_CACHE" -maxdepth 1 -name "$2-*" -mtime +14 -exec rm -rf {} + 2>/dev/null || true
}

# What both `npm start` and `npm test` need on this machine: npm packages, a
# Docker engine, and the Temporal CLI on PATH. Arguments, if any, are a command
# run once the engine is up, before the Temporal CLI (whose first build takes minutes).
prepare_machine() {
  bash "$ROOT/infra/deps.sh"
  bash "$ROOT/infra/docker.sh"
  [ $# -eq 0 ] || "$@"
  local temporal_cli
  temporal_cli=$(bash "$ROOT/infra/temporal.sh")
  export PATH="$(dirname "$temporal_cli"):$PATH"
}
