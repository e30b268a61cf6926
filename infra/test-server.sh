#!/usr/bin/env bash
# Prints the path of a launcher for Temporal's time-skipping test server (the
# Java SDK's in-memory server), which test/workflow runs through
# TestWorkflowEnvironment.createTimeSkipping. The SDK would download it at run
# time, which the tests must not do; Maven Central serves the same server as a
# jar, so this fetches it with its dependencies into .tools/temporal-test-server
# once (idempotent: later runs only print the path). The server's sources come
# too: infra/test-server.patch fixes a bug that hung the workflow tests (see
# there), compiled into a class folder that comes first on the classpath.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=1.33.0
PATCH="$ROOT/infra/test-server.patch"
DIR="$TOOLS_DIR/temporal-test-server"
# A new patch gets a new launcher (and so a rebuild) through the patch's hash.
LAUNCHER="$DIR/run-$VERSION-$(sha256sum "$PATCH" | cut -c1-12)"
# Kept in the machine's tool cache (lib.sh) as the launcher's name, which holds the version and the patch.
if [ -x "$LAUNCHER" ]; then tool_to_cache "$DIR" temporal-test-server "$(basename "$LAUNCHER")"; echo "$LAUNCHER"; exit 0; fi
if tool_from_cache "$DIR" temporal-test-server "$(basename "$LAUNCHER")"; then echo "$LAUNCHER"; exit 0; fi
missing=()
command -v javac >/dev/null || missing+=(default-jdk-headless)
command -v git >/dev/null || missing+=(git)
command -v mvn >/dev/null || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
  is_debian_root || fail "the workflow tests need ${missing[*]} (a JDK >= 11 and Maven): install them"
  apt_install "${missing[@]}"
fi
step "fetching the Temporal test server $VERSION, its sources and dependencies from Maven into .tools (first run only)"
mkdir -p "$DIR"
rm -f "$DIR/pom.xml" # a new file, not the tool cache's (lib.sh) written over
cat >"$DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>drydock</groupId>
  <artifactId>temporal-test-server-fetch</artifactId>
  <version>0</version>
  <dependencies>
    <dependency>
      <groupId>io.temporal</groupId>
      <artifactId>temporal-test-server</artifactId>
      <version>$VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
LIB="$DIR/lib-$VERSION"
[ -f "$LIB/temporal-test-server-$VERSION.jar" ] \
  || mvn -B -q -Dstyle.color=never -f "$DIR/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$LIB" >&2 || fail "fetching the Temporal test server from Maven failed (see above)"
SOURCES="$DIR/temporal-test-server-$VERSION-sources.jar"
[ -f "$SOURCES" ] \
  || mvn -B -q -Dstyle.color=never dependency:copy -Dartifact="io.temporal:temporal-test-server:$VERSION:jar:sources" \
    -DoutputDirectory="$DIR" >&2 || fail "fetching the Temporal test server's sources from Maven failed (see above)"

# Patch and compile outside any git work tree (git apply works on plain files
# there), then move the classes in place.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
classes="$LAUNCHER.classes"
files=$(grep '^+++ b/' "$PATCH" | sed 's|^+++ b/||')
# shellcheck disable=SC2086 # one path per word
(cd "$work" && jar xf "$SOURCES" $files && git apply "$PATCH") \
  || fail "infra/test-server.patch does not apply to the test server $VERSION's sources"
# shellcheck disable=SC2086
(cd "$work" && javac -nowarn -encoding UTF-8 -cp "$LIB/*" -d classes $files 2>&1 | { grep -v '^Note:' >&2 || true; }) \
  || fail "compiling the patched test server failed (see above)"
rm -rf "$classes"
mv "$work/classes" "$classes"
# Run as `<launcher> <port>` (test/workflow/server.ts). A short JVM start: the
# client compiler tier and the serial collector.
cat >"$LAUNCHER.tmp" <<EOF
#!/bin/sh
here=\$(dirname "\$0")
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "\$here/$(basename "$classes"):\$here/lib-$VERSION/*" io.temporal.testserver.TestServer "\$@"
EOF
chmod +x "$LAUNCHER.tmp"
mv "$LAUNCHER.tmp" "$LAUNCHER"
tool_to_cache "$DIR" temporal-test-server "$(basename "$LAUNCHER")"
echo "$LAUNCHER"
