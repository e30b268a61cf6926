# The Temporal server image: the binary infra/temporal-pg.sh builds from Go modules
# (go.temporal.io/server with its PostgreSQL plugin), temporal-sql-tool and the
# server's PostgreSQL schemas, and the Temporal CLI for the namespace set-up.
# One image for the server, the schema step and the set-up step of
# infra/compose/control.yaml. Built by infra/images.sh from a staged context.
ARG BASE_IMAGE=debian:trixie-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates netcat-openbsd \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /etc/temporal temporal
COPY temporal-server temporal-sql-tool temporal temporal-entrypoint.sh /usr/local/bin/
COPY schema /etc/temporal/schema/postgresql/v12
WORKDIR /etc/temporal
USER temporal
ENTRYPOINT ["/usr/local/bin/temporal-entrypoint.sh"]
