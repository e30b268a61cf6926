#!/bin/sh
# First start of an empty $PGDATA: initdb, then the init scripts against a
# server that listens on its socket only. Every start: postgres in the
# foreground (SIGINT: fast shutdown). Extra arguments go to postgres.
# The parts of the official image's contract that the deployment's compose file
# and repos' compose files use: POSTGRES_USER, POSTGRES_PASSWORD (or
# POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_DB, POSTGRES_INITDB_ARGS,
# /docker-entrypoint-initdb.d/*.sh and *.sql, data in /var/lib/postgresql/data.
set -eu
export POSTGRES_USER=${POSTGRES_USER:-postgres}
export POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
if [ "$method" != trust ]; then : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)}"; fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pw"
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of arguments
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -A "$method" --auth-local=trust ${POSTGRES_INITDB_ARGS:-} >/dev/null
  rm -f "$pw"
  echo "host all all all $method" >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -qc "create database \"$POSTGRES_DB\"" >/dev/null
  fi
  for script in /docker-entrypoint-initdb.d/*; do
    case "$script" in
      *.sh) echo "postgres-entrypoint: running $script" && sh "$script" ;;
      *.sql) echo "postgres-entrypoint: running $script" && psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -qf "$script" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
