#!/bin/sh
# Runs once, on the first start of an empty PostgreSQL volume (the image's
# /docker-entrypoint-initdb.d): a role for Temporal, which creates its own two
# databases (temporal-schema.sh), and a role and database for drydock.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v temporal_password="$TEMPORAL_DB_PASSWORD" -v drydock_password="$DRYDOCK_DB_PASSWORD" <<'SQL'
CREATE ROLE temporal LOGIN CREATEDB PASSWORD :'temporal_password';
CREATE ROLE drydock LOGIN PASSWORD :'drydock_password';
CREATE DATABASE drydock OWNER drydock;
SQL
