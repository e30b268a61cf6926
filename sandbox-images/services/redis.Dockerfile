# Redis for a repo's services as drydock/redis:8, built here from Debian's package
# (no registry): the official image's contract a compose file relies on: data in
# /data (the working folder), `redis-server` as the command, a command that
# starts with a flag or names a .conf file given to redis-server
# (redis-entrypoint.sh), a non-root user. Protected mode stays on: a session's
# services and sandbox share one loopback, which protected mode allows.
ARG BASE_IMAGE=debian:trixie-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
