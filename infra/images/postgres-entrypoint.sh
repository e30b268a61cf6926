#!/bin/sh
# First start of an empty $PGDATA: initdb with password authentication, then the
# init scripts against a server that listens on its socket only. Every start:
# postgres in the foreground (SIGINT: fast shutdown). Extra arguments go to postgres.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
export POSTGRES_USER=${POSTGRES_USER:-postgres}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -A scram-sha-256 --auth-local=trust >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  for script in /docker-entrypoint-initdb.d/*.sh; do
    [ -e "$script" ] || continue
    echo "postgres-entrypoint: running $script"
    sh "$script"
  done
  pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
