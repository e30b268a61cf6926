#!/usr/bin/env bash
# Builds the images the deployment files (infra/compose, infra/k8s) name, on this
# machine's Docker engine, from debian:trixie-slim only: no registry, no Docker Hub.
# Idempotent: Docker's layer cache makes a rebuild of unchanged inputs take seconds.
#
#   bash infra/images.sh [drydock|temporal|postgresql ...]   (default: all three)
#
# Prints each built tag on stdout; progress on stderr.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=$(node -p 'require(process.argv[1]).version' "$ROOT/package.json")
TEMPORAL_VERSION=$(sed -n 's/^require go.temporal.io\/server v\([^ ]*\)$/\1/p' "$ROOT/infra/temporal-server/go.mod")
# A staging folder per run: npm test's background job and a suite may build at once.
mkdir -p "$DATA_DIR"
STAGE=$(mktemp -d "$DATA_DIR/image-context.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
CA_BUNDLE=${DRYDOCK_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}

# The legacy builder sends the context as it is: stage real files (node_modules
# and .tools are symlinks in worktrees) and only what the image needs.
stage() {
  rm -rf "$STAGE/$1" && mkdir -p "$STAGE/$1" && echo "$STAGE/$1"
}

build() {
  local tag=$1 context=$2 file=$3 start=$SECONDS
  step "building $tag"
  docker build --network host -q -t "$tag" -f "$file" "$context" >/dev/null \
    || fail "building $tag failed (rerun without -q: docker build --network host -f $file $context)"
  step "$tag ready in $((SECONDS - start)) s"
  echo "$tag"
}

drydock() {
  local ctx
  ctx=$(stage drydock)
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] && printf '%s\0' "$f"
  done | grep -zv '^data/' | xargs -0 cp --parents -t "$ctx")
  cp "$CA_BUNDLE" "$ctx/build-ca.pem"
  build "drydock:$VERSION" "$ctx" "$ctx/infra/Dockerfile"
}

temporal() {
  local server ctx
  server=$(bash "$ROOT/infra/temporal-pg.sh" build)
  ctx=$(stage temporal)
  cp "$server/temporal-server" "$server/temporal-sql-tool" "$ctx/"
  cp -r "$server/schema" "$ctx/schema"
  cp "$(bash "$ROOT/infra/temporal.sh")" "$ctx/temporal"
  cp "$ROOT/infra/images/temporal-entrypoint.sh" "$ctx/"
  build "drydock-temporal:$TEMPORAL_VERSION" "$ctx" "$ROOT/infra/images/temporal.Dockerfile"
}

postgresql() {
  local ctx
  ctx=$(stage postgresql)
  cp "$ROOT/infra/images/postgres-entrypoint.sh" "$ctx/"
  build "drydock-postgresql:17" "$ctx" "$ROOT/infra/images/postgresql.Dockerfile"
}

bash "$ROOT/infra/docker.sh"
docker image inspect debian:trixie-slim >/dev/null 2>&1 \
  || fail "debian:trixie-slim is not on this engine: docker pull it, or docker load it from a machine that has it"
for image in "${@:-drydock temporal postgresql}"; do
  for one in $image; do
    case "$one" in
      drydock | temporal | postgresql) "$one" ;;
      *) fail "unknown image $one (drydock, temporal or postgresql)" ;;
    esac
  done
done
