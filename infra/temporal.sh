#!/usr/bin/env bash
# Prints the path of a Temporal CLI (which carries the dev server and Web UI):
# one on PATH, else the project's copy in .tools/bin, else builds that copy
# from Go modules (minutes on 2 cores the first time).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=v1.5.1
if command -v temporal >/dev/null; then command -v temporal; exit 0; fi
if [ -x "$TOOLS_DIR/bin/temporal" ]; then echo "$TOOLS_DIR/bin/temporal"; exit 0; fi
command -v go >/dev/null || fail "no Temporal CLI found and no Go toolchain to build one: install Go >= 1.23, or put 'temporal' ($VERSION) on PATH"
stamp="$VERSION $(go version)"
if tool_from_cache "$TOOLS_DIR/bin/temporal" temporal-cli "$stamp"; then echo "$TOOLS_DIR/bin/temporal"; exit 0; fi
step "building the Temporal CLI $VERSION from Go modules into .tools/bin (first run only; takes several minutes)"
mkdir -p "$TOOLS_DIR/bin"
# Later tags carry replace directives that 'go install pkg@version' refuses.
GOTOOLCHAIN=local GOBIN="$TOOLS_DIR/bin" GOFLAGS=-mod=mod \
  go install "github.com/temporalio/cli/cmd/temporal@$VERSION" >&2 \
  || fail "building the Temporal CLI failed (see above); install 'temporal' $VERSION on PATH instead"
tool_to_cache "$TOOLS_DIR/bin/temporal" temporal-cli "$stamp"
echo "$TOOLS_DIR/bin/temporal"
