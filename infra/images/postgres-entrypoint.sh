#!/bin/bash
# The official postgres image's docker-entrypoint.sh contract, for this image
# built from Debian's package (the control plane's, and repos' services as
# drydock/postgres:17):
# - the command is `postgres` (the default) or starts with a flag (`-c x=y`,
#   then `postgres` is put before it): on the first start of an empty $PGDATA,
#   initdb, then /docker-entrypoint-initdb.d/*.sh (run when executable, sourced
#   otherwise), *.sql, *.sql.gz, *.sql.xz and *.sql.zst, in name order, against
#   a server that listens on its socket only; then postgres in the foreground
#   with the command's arguments (SIGINT: fast shutdown), listening on every
#   address unless the arguments say otherwise;
# - any other command (`bash`, `psql …`) runs as it is;
# - POSTGRES_USER, POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust),
#   POSTGRES_DB, POSTGRES_INITDB_ARGS, POSTGRES_INITDB_WALDIR; data in
#   /var/lib/postgresql/data; the socket in /var/run/postgresql.
# It runs as the image's postgres user (never root: the sandbox's services have no capabilities).
set -Eeuo pipefail

# Whether the arguments only ask postgres about itself (no server, no init).
wants_help() {
  local arg
  for arg; do
    case "$arg" in -'?' | --help | --describe-config | -V | --version | -C | -C*) return 0 ;; esac
  done
  return 1
}

# psql against the server init runs, as POSTGRES_USER, in POSTGRES_DB.
process_sql() {
  PGHOST= PGHOSTADDR= psql -v ON_ERROR_STOP=1 --no-password --no-psqlrc -U "$POSTGRES_USER" -d "$POSTGRES_DB" "$@"
}

run_init_scripts() {
  local f
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh)
        echo "docker-entrypoint: running $f"
        if [ -x "$f" ]; then "$f"; else . "$f"; fi
        ;;
      *.sql) echo "docker-entrypoint: running $f" && process_sql -qf "$f" ;;
      *.sql.gz) echo "docker-entrypoint: running $f" && gunzip -c "$f" | process_sql -q ;;
      *.sql.xz) echo "docker-entrypoint: running $f" && xzcat "$f" | process_sql -q ;;
      *.sql.zst) echo "docker-entrypoint: running $f" && zstd -dc "$f" | process_sql -q ;;
      *) if [ -e "$f" ]; then echo "docker-entrypoint: ignoring $f"; fi ;;
    esac
  done
}

# First start: initdb, the database, the init scripts against a socket-only server with the command's settings.
init_database() {
  local method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256} pw
  if [ "$method" != trust ] && [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo 'docker-entrypoint: set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)' >&2
    exit 1
  fi
  pw=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pw"
  # As the official image: psql (here and in .sh init scripts) gives the password when local connections
  # need one (POSTGRES_INITDB_ARGS=--auth-local=md5, as brianc/node-postgres's compose file has it).
  export PGPASSWORD="${PGPASSWORD:-${POSTGRES_PASSWORD:-}}"
  local waldir=()
  [ -z "${POSTGRES_INITDB_WALDIR:-}" ] || waldir=(--waldir "$POSTGRES_INITDB_WALDIR")
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of arguments
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -A "$method" --auth-local=trust \
    "${waldir[@]}" ${POSTGRES_INITDB_ARGS:-} >/dev/null
  rm -f "$pw"
  echo "host all all all $method" >>"$PGDATA/pg_hba.conf"
  local settings=''
  [ $# -lt 2 ] || settings=$(printf '%q ' "${@:2}")
  # As the official image: the command's settings, then the default port (a later -p wins), so
  # init scripts that name no port (psql's default, or PGPORT) reach it whatever port the command gives.
  pg_ctl -D "$PGDATA" -w -o "$settings -c listen_addresses='' -p ${PGPORT:-5432}" start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    POSTGRES_DB=postgres process_sql -qc "create database \"$POSTGRES_DB\"" >/dev/null
  fi
  run_init_scripts
  pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
  echo 'docker-entrypoint: init done; starting postgres'
}

export POSTGRES_USER=${POSTGRES_USER:-postgres}
export POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
[ $# -gt 0 ] || set -- postgres
if [ "${1:0:1}" = - ]; then set -- postgres "$@"; fi
if [ "$1" = postgres ] && ! wants_help "$@"; then
  [ -s "$PGDATA/PG_VERSION" ] || init_database "$@"
  # Every address unless the command names its own (a later -c wins).
  shift
  set -- postgres -c listen_addresses='*' "$@"
fi
exec "$@"
