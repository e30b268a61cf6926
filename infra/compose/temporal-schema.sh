#!/bin/sh
# Temporal's databases on PostgreSQL: created when missing, their schema set up
# and brought to the versions this admin-tools image carries (the server's own
# version). Every step is idempotent, so this runs on every `up` and is also
# the schema step of a Temporal upgrade (docs/operations.md, "Upgrades").
set -eu
sql() { temporal-sql-tool --plugin postgres12 --ep postgresql -p 5432 -u temporal --db "$@"; }
schema=/etc/temporal/schema/postgresql/v12
for i in $(seq 1 30); do nc -z postgresql 5432 && break; sleep 2; done
sql temporal create
sql temporal setup-schema -v 0.0
sql temporal update-schema -d "$schema/temporal/versioned"
sql temporal_visibility create
sql temporal_visibility setup-schema -v 0.0
sql temporal_visibility update-schema -d "$schema/visibility/versioned"
echo 'temporal-schema: done'
