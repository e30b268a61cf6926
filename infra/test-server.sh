#!/usr/bin/env bash
# Prints the path of a launcher for Temporal's time-skipping test server (the
# Java SDK's in-memory server), which test/workflow runs through
# TestWorkflowEnvironment.createTimeSkipping. The SDK would download it from a
# CDN we cannot reach; Maven Central serves the same server as a jar, so this
# fetches it with its dependencies into .tools/temporal-test-server once.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=1.33.0
DIR="$TOOLS_DIR/temporal-test-server"
LAUNCHER="$DIR/run-$VERSION"
if [ -x "$LAUNCHER" ]; then echo "$LAUNCHER"; exit 0; fi
command -v mvn >/dev/null || fail "no mvn to fetch the Temporal test server: apt-get install maven (needs Java >= 11)"
command -v java >/dev/null || fail "no java to run the Temporal test server: apt-get install default-jre-headless"
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
mvn -B -q -f "$DIR/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
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
