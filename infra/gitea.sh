#!/usr/bin/env bash
# Prints the folder of a Gitea server built from Go modules, for the tests of
# the Gitea forge (test/support/gitea.ts starts one per suite). Idempotent:
# built once into .tools/gitea (cached; skipped when its stamp matches),
# progress lines on stderr.
#
#   bash infra/gitea.sh      builds if missing, prints the folder: gitea (the binary)
#                            and the options/, templates/ and public/ it reads at run
#                            time (STATIC_ROOT_PATH)
#
# The module's go.mod has replace directives, which `go install pkg@version`
# refuses: so the module's source is downloaded and built in a copy, where its
# replaces hold. Its SQLite driver is pure Go (modernc), so no CGO and no tags.
# The web front end's bundle is not in the module (it is built by pnpm); the
# REST API, git over HTTP and webhooks, all the tests use, work without it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=v1.27.3
DIR="$TOOLS_DIR/gitea"

build() {
  local stamp="$VERSION $(go version 2>/dev/null)"
  if [ -x "$DIR/gitea" ] && [ "$(cat "$DIR/stamp" 2>/dev/null)" = "$stamp" ]; then tool_to_cache "$DIR" gitea "$stamp"; return; fi
  tool_from_cache "$DIR" gitea "$stamp" && return
  command -v go >/dev/null || fail "building Gitea needs a Go toolchain (>= 1.26)"
  step "building Gitea $VERSION from Go modules into .tools/gitea (first run only: about 15 minutes on 2 busy cores with cold Go caches, 1 to 2 once they hold it)"
  local start=$SECONDS src work
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
  src=$(go mod download -json "code.gitea.io/gitea@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || fail "downloading code.gitea.io/gitea@$VERSION failed (see above)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cp -r "$src" "$work/gitea" && chmod -R u+w "$work/gitea"
  rm -rf "$DIR" && mkdir -p "$DIR"
  # Its Makefile's flags: the version it reports (API /version), stripped, no VCS stamp.
  (cd "$work/gitea" && nice -n 10 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X 'main.Version=${VERSION#v}'" -o "$DIR/gitea" .) >&2 \
    || fail "building Gitea failed (see above)"
  cp -r "$work/gitea/options" "$work/gitea/templates" "$work/gitea/public" "$DIR/"
  echo "$stamp" >"$DIR/stamp"
  tool_to_cache "$DIR" gitea "$stamp"
  step "built Gitea in $((SECONDS - start)) s"
}

# One build at a time on a machine: npm test's background job and a suite may both ask.
mkdir -p "$TOOLS_DIR"
(flock 9 && build) 9>"$TOOLS_DIR/gitea.lock"
echo "$DIR"
