#!/usr/bin/env bash
# Prints the path of a launcher for Temporal's time-skipping test server (the
# Java SDK's in-memory server), which test/workflow runs through
# TestWorkflowEnvironment.createTimeSkipping. The SDK would download it at run
# time, which the tests must not do; Maven Central serves the same server as a
# jar, so this fetches it with its dependencies into .tools/temporal-test-server
# once (idempotent: later runs only print the path).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=1.33.0
DIR="$TOOLS_DIR/temporal-test-server"
LAUNCHER="$DIR/run-$VERSION"
if [ -x "$LAUNCHER" ]; then echo "$LAUNCHER"; exit 0; fi
missing=()
command -v java >/dev/null || missing+=(default-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
  is_debian_root || fail "the workflow tests need ${missing[*]} (Java >= 11 and Maven): install them"
  apt_install "${missing[@]}"
fi
step "fetching the Temporal test server $VERSION and its dependencies from Maven into .tools (first run only)"
mkdir -p "$DIR"
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
rm -rf "$DIR/lib-$VERSION"
mvn -B -q -Dstyle.color=never -f "$DIR/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$DIR/lib-$VERSION" >&2 || fail "fetching the Temporal test server from Maven failed (see above)"
# The SDK runs the launcher as `<launcher> <port> [extra args]` and gives it 5 s
# to answer, so keep the JVM's start short: the client compiler tier and the serial collector.
cat >"$LAUNCHER.tmp" <<EOF
#!/bin/sh
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "\$(dirname "\$0")/lib-$VERSION/*" io.temporal.testserver.TestServer "\$@"
EOF
chmod +x "$LAUNCHER.tmp"
mv "$LAUNCHER.tmp" "$LAUNCHER"
echo "$LAUNCHER"
