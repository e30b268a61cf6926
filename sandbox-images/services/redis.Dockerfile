# Redis for a repo's services, built here from Debian's package (no registry):
# the parts of the official image's contract a compose file relies on: data in
# /data (the working folder), `redis-server` as the command (arguments after it
# go to the server), a non-root user. Protected mode stays on: a session's
# services and sandbox share one loopback, which protected mode allows.
ARG BASE_IMAGE=debian:trixie-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server"]
