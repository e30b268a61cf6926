#!/usr/bin/env bash
# Temporal on PostgreSQL, for tests and benchmarks (not `npm start`, which
# keeps the CLI's dev server). Idempotent; progress lines on stderr.
#
#   bash infra/temporal-pg.sh build   builds the server and temporal-sql-tool into
#                                     .tools/temporal-server (cached) and prints that folder
#   bash infra/temporal-pg.sh run     builds, starts a throwaway PostgreSQL, creates or
#                                     updates both schemas, starts the server, registers the
#                                     namespace and drydock's search attributes, prints
#                                     "ready <address>" on stdout; Ctrl-C/SIGTERM stops both
#
# Settings (run):
#   TEMPORAL_PG_DIR    state: the PostgreSQL cluster, config, logs (default data/temporal-pg)
#   TEMPORAL_PG_PORT   the frontend's gRPC port (default 7333); the server also uses the
#                      next 9 ports, PostgreSQL the 10th after it
#   TEMPORAL_PG_TLS    a folder with ca.pem, server.pem, server-key.pem: the frontend and
#                      internode traffic use mTLS (clients need a certificate signed by ca.pem)
#   TEMPORAL_NAMESPACE the namespace to register (default "default")
#   TEMPORAL_PG_DYNAMIC_CONFIG  dynamic configuration to run with (default drydock's,
#                      infra/compose/dynamicconfig/drydock.yaml; /dev/null: the server's defaults)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SERVER_DIR="$TOOLS_DIR/temporal-server"
SRC="$ROOT/infra/temporal-server"

build() {
  local stamp
  stamp=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-16)
  if [ -f "$SERVER_DIR/stamp" ] && [ "$(cat "$SERVER_DIR/stamp")" = "$stamp" ]; then tool_to_cache "$SERVER_DIR" temporal-server "$stamp"; return; fi
  tool_from_cache "$SERVER_DIR" temporal-server "$stamp" && return
  command -v go >/dev/null || fail "building the Temporal server needs a Go toolchain (>= 1.25)"
  local version
  version=$(sed -n 's/^require go.temporal.io\/server \(v[^ ]*\)$/\1/p' "$SRC/go.mod")
  step "building the Temporal server $version and temporal-sql-tool from Go modules into .tools/temporal-server (first run only)"
  local start=$SECONDS
  rm -rf "$SERVER_DIR" && mkdir -p "$SERVER_DIR" # written anew: its files may be the tool cache's (lib.sh)
  (
    cd "$SRC"
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod
    go build -o "$SERVER_DIR/temporal-server" .
    go build -o "$SERVER_DIR/temporal-sql-tool" go.temporal.io/server/cmd/tools/sql
    # The versioned schema folders ship in the server module: keep a copy next to the tool.
    rm -rf "$SERVER_DIR/schema"
    cp -r "$(go list -m -f '{{.Dir}}' go.temporal.io/server)/schema/postgresql/v12" "$SERVER_DIR/schema"
    chmod -R u+w "$SERVER_DIR/schema"
  ) >&2 || fail "building the Temporal server failed (see above)"
  echo "$stamp" >"$SERVER_DIR/stamp"
  tool_to_cache "$SERVER_DIR" temporal-server "$stamp"
  step "built in $((SECONDS - start)) s"
}

pg_bin() {
  local dir
  dir=$(compgen -G '/usr/lib/postgresql/*/bin' | sort -V | tail -1) \
    || fail "PostgreSQL is not installed (bash infra/test-services.sh installs it)"
  echo "$dir"
}

# initdb and postgres refuse root: as root they run as the postgres user
# (setpriv execs in place, so signals reach postgres itself).
AS_PG=()
if [ "$(id -u)" = 0 ]; then AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --); fi

start_postgres() {
  local bin
  bin=$(pg_bin)
  if [ ! -f "$STATE/pg/PG_VERSION" ]; then
    step "creating a PostgreSQL cluster in $STATE/pg"
    mkdir -p "$STATE/pg"
    if [ "$(id -u)" = 0 ]; then
      chown postgres: "$STATE/pg"
      chmod o+x "$STATE"
    fi
    "${AS_PG[@]}" "$bin/initdb" -D "$STATE/pg" -U postgres -A trust --no-sync >"$STATE/initdb.log" \
      || fail "initdb failed (see $STATE/initdb.log)"
  fi
  local old
  drop_stale_pidfile "$STATE/pg/postmaster.pid" "$STATE/pg"
  old=$(head -1 "$STATE/pg/postmaster.pid" 2>/dev/null || true)
  if [ -n "$old" ]; then
    fail "a PostgreSQL of an earlier run still uses $STATE/pg (pid $old): stop it (kill -INT $old) or set TEMPORAL_PG_DIR"
  fi
  step "starting PostgreSQL on 127.0.0.1:$PG_PORT"
  "${AS_PG[@]}" "$bin/postgres" -D "$STATE/pg" -p "$PG_PORT" -h 127.0.0.1 -k "$STATE/pg" -c fsync=off \
    -c max_connections=200 >>"$STATE/postgres.log" 2>&1 &
  PG_PID=$!
  for _ in $(seq 1 150); do
    kill -0 "$PG_PID" 2>/dev/null || fail "PostgreSQL exited at start (see $STATE/postgres.log)"
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && return
    sleep 0.2
  done
  fail "PostgreSQL did not accept connections within 30 s (see $STATE/postgres.log)"
}

# create-database and setup-schema once; update-schema every time (it applies what is newer).
schemas() {
  local sql=("$SERVER_DIR/temporal-sql-tool" --plugin postgres12 --ep 127.0.0.1 -p "$PG_PORT" -u postgres)
  local store
  for store in temporal:temporal temporal_visibility:visibility; do
    local db=${store%%:*} dir=${store##*:}
    if ! "$(pg_bin)/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "select 1 from pg_database where datname='$db'" | grep -q 1; then
      step "creating database $db and its schema"
      "${sql[@]}" --db "$db" create-database >>"$STATE/schema.log" 2>&1
      "${sql[@]}" --db "$db" setup-schema -v 0.0 >>"$STATE/schema.log" 2>&1 || fail "setup-schema $db failed (see $STATE/schema.log)"
    fi
    step "updating schema $db from $SERVER_DIR/schema/$dir/versioned"
    "${sql[@]}" --db "$db" update-schema -d "$SERVER_DIR/schema/$dir/versioned" >>"$STATE/schema.log" 2>&1 \
      || fail "update-schema $db failed (see $STATE/schema.log)"
  done
}

write_config() {
  local tls=""
  if [ -n "${TEMPORAL_PG_TLS:-}" ]; then
    local dir
    dir=$(cd "$TEMPORAL_PG_TLS" && pwd)
    local server="certFile: $dir/server.pem
          keyFile: $dir/server-key.pem
          requireClientAuth: true
          clientCaFiles: [$dir/ca.pem]"
    local client="serverName: localhost
          rootCaFiles: [$dir/ca.pem]"
    tls="  tls:
    internode:
      server:
          $server
      client:
          $client
    frontend:
      server:
          $server
      client:
          $client
    systemWorker:
      certFile: $dir/server.pem
      keyFile: $dir/server-key.pem
      client:
          $client"
  fi
  store() {
    cat <<EOF
      sql:
        pluginName: postgres12
        databaseName: $1
        connectAddr: 127.0.0.1:$PG_PORT
        connectProtocol: tcp
        user: postgres
        maxConns: $2
        maxIdleConns: $2
        maxConnLifetime: 1h
EOF
  }
  svc() { printf '  %s:\n    rpc:\n      grpcPort: %s\n      membershipPort: %s\n      bindOnIP: 127.0.0.1\n' "$@"; }
  cat >"$STATE/temporal.yaml" <<EOF
# Written by infra/temporal-pg.sh at every start.
log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
$(store temporal 20)
    visibility:
$(store temporal_visibility 10)
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: 127.0.0.1:$((PORT + 9))
$tls
services:
$(svc frontend "$PORT" $((PORT + 4)))
      httpPort: $((PORT + 8))
$(svc history $((PORT + 1)) $((PORT + 5)))
$(svc matching $((PORT + 2)) $((PORT + 6)))
$(svc worker $((PORT + 3)) $((PORT + 7)))
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: 127.0.0.1:$PORT
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: $STATE/dynamicconfig.yaml
  pollInterval: 10s
EOF
  # A new namespace and its search attributes become usable within a second, not ten.
  {
    cat <<EOF
system.namespaceCacheRefreshInterval:
  - value: 1s
EOF
    cat "${TEMPORAL_PG_DYNAMIC_CONFIG:-$ROOT/infra/compose/dynamicconfig/drydock.yaml}"
  } >"$STATE/dynamicconfig.yaml"
}

# The Temporal CLI reads the same TEMPORAL_* settings as drydock.
temporal_cli() {
  local env=(TEMPORAL_ADDRESS="127.0.0.1:$PORT")
  if [ -n "${TEMPORAL_PG_TLS:-}" ]; then
    env+=(TEMPORAL_TLS_SERVER_CA_CERT_PATH="$TEMPORAL_PG_TLS/ca.pem" TEMPORAL_TLS_SERVER_NAME=localhost
      TEMPORAL_TLS_CLIENT_CERT_PATH="$TEMPORAL_PG_TLS/server.pem" TEMPORAL_TLS_CLIENT_KEY_PATH="$TEMPORAL_PG_TLS/server-key.pem")
  fi
  env -u TEMPORAL_PROFILE -u TEMPORAL_CONFIG_FILE "${env[@]}" "$CLI" "$@"
}

register() {
  local ns=${TEMPORAL_NAMESPACE:-default}
  for _ in $(seq 1 150); do
    temporal_cli operator cluster health >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "the Temporal server exited at start (see $STATE/temporal.log)"
    sleep 0.2
  done
  temporal_cli operator cluster health >/dev/null 2>&1 || fail "the Temporal server did not answer within 30 s (see $STATE/temporal.log)"
  if ! temporal_cli operator namespace describe -n "$ns" >/dev/null 2>&1; then
    step "registering namespace $ns"
    temporal_cli operator namespace create -n "$ns" --retention 72h >/dev/null
  fi
  step "registering search attributes DrydockPhase, DrydockRepo"
  for _ in $(seq 1 60); do
    # Existing attributes are fine; the list query proves the frontend sees both.
    temporal_cli operator search-attribute create -n "$ns" --name DrydockPhase --type Keyword \
      --name DrydockRepo --type Keyword >/dev/null 2>&1 || true
    temporal_cli workflow list -n "$ns" --limit 1 --query "DrydockPhase = 'x' and DrydockRepo = 'y'" >/dev/null 2>&1 && return
    sleep 0.5
  done
  fail "namespace $ns or its search attributes did not become usable (see $STATE/temporal.log)"
}

stop() {
  trap - EXIT INT TERM
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  # SIGINT: PostgreSQL's fast shutdown.
  [ -n "${PG_PID:-}" ] && kill -INT "$PG_PID" 2>/dev/null && wait "$PG_PID" 2>/dev/null
  true
}

run() {
  local start=$SECONDS
  build
  CLI=$(bash "$ROOT/infra/temporal.sh")
  STATE=$(mkdir -p "${TEMPORAL_PG_DIR:-$DATA_DIR/temporal-pg}" && cd "${TEMPORAL_PG_DIR:-$DATA_DIR/temporal-pg}" && pwd)
  PORT=${TEMPORAL_PG_PORT:-7333}
  # Temporal's PostgreSQL schema stores each service's membership port in a smallint.
  [ "$PORT" -le 32757 ] || fail "TEMPORAL_PG_PORT: at most 32757 (Temporal keeps its ports in a smallint), got $PORT"
  PG_PORT=$((PORT + 10))
  trap stop EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start_postgres
  schemas
  write_config
  step "starting the Temporal server on 127.0.0.1:$PORT${TEMPORAL_PG_TLS:+ (mTLS)} (log: $STATE/temporal.log)"
  "$SERVER_DIR/temporal-server" -config "$STATE/temporal.yaml" >>"$STATE/temporal.log" 2>&1 &
  SERVER_PID=$!
  echo "$SERVER_PID" >"$STATE/temporal-server.pid"
  register
  step "Temporal on PostgreSQL is up in $((SECONDS - start)) s"
  echo "ready 127.0.0.1:$PORT"
  wait "$SERVER_PID" || fail "the Temporal server exited (see $STATE/temporal.log)"
}

case "${1:-run}" in
  build) build && echo "$SERVER_DIR" ;;
  run) run ;;
  *) fail "usage: infra/temporal-pg.sh [build|run]" ;;
esac
