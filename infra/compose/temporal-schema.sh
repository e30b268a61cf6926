#!/bin/sh
# Temporal's databases on PostgreSQL: created when missing, their schema set up
# and brought to the versions this image carries (infra/images/temporal.Dockerfile) (the server's own
# version). Every step is idempotent, so this runs on every `up` and is also
# the schema step of a Temporal upgrade (docs/operations.md, "Upgrades").
set -eu
host=${POSTGRES_SEEDS:-postgresql} port=${DB_PORT:-5432}
sql() { temporal-sql-tool --plugin postgres12 --ep "$host" -p "$port" -u temporal --db "$@"; }
schema=/etc/temporal/schema/postgresql/v12
for i in $(seq 1 30); do nc -z "$host" "$port" && break; sleep 2; done
sql temporal create
sql temporal setup-schema -v 0.0
sql temporal update-schema -d "$schema/temporal/versioned"
sql temporal_visibility create
sql temporal_visibility setup-schema -v 0.0
sql temporal_visibility update-schema -d "$schema/visibility/versioned"
echo 'temporal-schema: done'
