#!/bin/sh
# The official redis image's docker-entrypoint.sh contract, for this image built
# from Debian's package (drydock/redis:8): a command that starts with a flag
# (`--appendonly yes`) or names a config file (`/etc/redis.conf`) is given to
# redis-server; `redis-server …` and any other command (`redis-cli …`, `sh`)
# run as they are. It runs as the image's redis user, never root.
set -e
case "${1:-}" in
  -* | *.conf) set -- redis-server "$@" ;;
  '') set -- redis-server ;;
esac
exec "$@"
