#!/bin/sh
# Writes the server's config from the same environment variables the official
# temporalio/server image reads (the subset drydock's compose file sets), then
# starts the server. Other commands (temporal-sql-tool, temporal, sh) run as given.
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
: "${POSTGRES_SEEDS:?set POSTGRES_SEEDS}" "${POSTGRES_USER:?set POSTGRES_USER}" "${POSTGRES_PWD:?set POSTGRES_PWD}"
port=${DB_PORT:-5432} ip=${BIND_ON_IP:-0.0.0.0} shards=${NUM_HISTORY_SHARDS:-4}
fe=${FRONTEND_GRPC_PORT:-7233}
broadcast=${TEMPORAL_BROADCAST_ADDRESS:-$(hostname -i 2>/dev/null | cut -d' ' -f1)}
[ "$ip" = 0.0.0.0 ] || broadcast=$ip
store() {
  cat <<YAML
      sql:
        pluginName: postgres12
        databaseName: $1
        connectAddr: $POSTGRES_SEEDS:$port
        connectProtocol: tcp
        user: $POSTGRES_USER
        password: "$POSTGRES_PWD"
        maxConns: $2
        maxIdleConns: $2
        maxConnLifetime: 1h
YAML
}
svc() { printf '  %s:\n    rpc:\n      grpcPort: %s\n      membershipPort: %s\n      bindOnIP: %s\n' "$1" "$2" "$3" "$ip"; }
config=/tmp/temporal.yaml
cat >"$config" <<YAML
log:
  stdout: true
  level: ${LOG_LEVEL:-warn}
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: $shards
  datastores:
    default:
$(store "${DBNAME:-temporal}" 20)
    visibility:
$(store "${VISIBILITY_DBNAME:-temporal_visibility}" 10)
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: $broadcast
services:
$(svc frontend "$fe" $((fe + 10)))
$(svc history $((fe + 1)) $((fe + 11)))
$(svc matching $((fe + 2)) $((fe + 12)))
$(svc worker $((fe + 3)) $((fe + 13)))
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
      rpcAddress: 127.0.0.1:$fe
dcRedirectionPolicy:
  policy: noop
YAML
if [ -n "${DYNAMIC_CONFIG_FILE_PATH:-}" ]; then
  printf 'dynamicConfigClient:\n  filepath: /etc/temporal/%s\n  pollInterval: 10s\n' "$DYNAMIC_CONFIG_FILE_PATH" >>"$config"
fi
exec temporal-server -config "$config"
