# PostgreSQL for the control plane, and for repos' services as drydock/postgres:17
# (sandbox-images/service-images.ts): Debian 13's postgresql (17), so it builds
# here from debian:trixie-slim with apt alone. Its entrypoint keeps the official
# image's contract (docker-entrypoint.sh, `postgres` as the command, its
# arguments, the POSTGRES_* environment, init scripts: postgres-entrypoint.sh).
ARG BASE_IMAGE=debian:trixie-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-17 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /docker-entrypoint-initdb.d /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres: /var/lib/postgresql /var/run/postgresql
ENV PATH=/usr/lib/postgresql/17/bin:$PATH PGDATA=/var/lib/postgresql/data
# Volumes: the data, and the socket folder, so the server runs on a read-only root
# filesystem too (a repo's service in a sandbox).
VOLUME ["/var/lib/postgresql/data", "/var/run/postgresql"]
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN ln -s docker-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
