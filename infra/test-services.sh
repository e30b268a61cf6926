#!/usr/bin/env bash
# What only the test suite needs on the host, besides Docker and Temporal:
# Debian's PostgreSQL server (the suite starts its own throwaway cluster; the
# embedded PGlite path needs nothing), Chromium for the review console tests,
# and Debian's docker-registry (tests of image pulls start their own on loopback).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
missing=()
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
[ ${#missing[@]} -eq 0 ] && exit 0
is_debian_root || fail "the tests need ${missing[*]}: install them (Debian: apt-get install ${missing[*]})"
apt_install "${missing[@]}"
# Debian's package starts a cluster of its own; the tests never use it.
if command -v pg_ctlcluster >/dev/null; then service postgresql stop >/dev/null 2>&1 || true; fi
