#!/usr/bin/env bash
# Prints the folder of code-server (VS Code in the browser) built from the npm
# registry and Debian's archive, for the console's editor (sandbox/editor.ts
# mounts it read-only at /opt/drydock-editor in a sandbox; never baked into an
# image). Idempotent: built once into .tools/code-server/<version> (cached;
# skipped when its stamp matches), progress lines on stderr.
#
#   bash infra/code-server.sh    builds if missing, prints the folder:
#                                bin/code-server (runs it with the carried node),
#                                lib/node, glibc/ and node_modules/code-server
#
# `npm install code-server` cannot work here: its postinstall runs `npm install`
# in lib/vscode, where @vscode/ripgrep downloads `rg` from GitHub. So: the
# package with --ignore-scripts, its dependencies likewise, Debian's ripgrep put
# where @vscode/ripgrep looks (bin/rg), the native modules rebuilt (kerberos
# needs libkrb5-dev), then the rest of its postinstall.sh by hand. Node.js 20
# (what 4.100.x requires) runs it: the host's, carried with the host's loader and
# the libraries it and the native modules link, patched to load them from the
# mount (as the helpers' glibc runtime does), so it runs in any Linux image.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
VERSION=4.100.3
MOUNT=/opt/drydock-editor
DIR="$TOOLS_DIR/code-server/$VERSION"
NATIVE="kerberos @parcel/watcher @vscode/deviceid @vscode/spdlog native-watchdog node-pty"

# The libraries a binary links (name and host path), the loader included.
libs_of() { ldd "$1" | sed -n 's/^\s*\(\S*\) => \(\/\S*\) .*/\1 \2/p; s/^\s*\(\/\S*ld-linux\S*\) .*/ld \1/p'; }

carry() { # carry DIR: node and every library of node and the native modules into DIR/glibc, patched
  local dir=$1 name file loader
  mkdir -p "$dir/lib" "$dir/glibc"
  cp "$(command -v node)" "$dir/lib/node"
  { libs_of "$dir/lib/node"; find "$dir/node_modules" -name '*.node' -path '*Release*' \
      -not -path '*obj.target*' -exec sh -c 'ldd "$1" 2>/dev/null' _ {} \; \
      | sed -n 's/^\s*\(\S*\) => \(\/\S*\) .*/\1 \2/p'; } | sort -u | while read -r name file; do
    if [ "$name" = ld ]; then cp "$file" "$dir/glibc/$(basename "$file")"; else cp -L "$file" "$dir/glibc/$name"; fi
  done
  loader=$(basename "$(libs_of "$dir/lib/node" | sed -n 's/^ld //p')")
  patchelf --set-interpreter "$MOUNT/glibc/$loader" --set-rpath "$MOUNT/glibc" "$dir/lib/node"
  # The native modules' own libraries (libkrb5, libstdc++) from the carried folder too.
  find "$dir/node_modules" -name '*.node' -path '*Release*' -not -path '*obj.target*' \
    -exec patchelf --set-rpath "$MOUNT/glibc" {} \;
  mkdir -p "$dir/bin"
  cat >"$dir/bin/code-server" <<EOF
#!/bin/sh
exec $MOUNT/lib/node $MOUNT/node_modules/code-server/out/node/entry.js "\$@"
EOF
  chmod 755 "$dir/bin/code-server"
}

build() {
  local stamp="$VERSION $(node --version) $(rg --version 2>/dev/null | head -1) carry 1"
  if [ -x "$DIR/bin/code-server" ] && [ "$(cat "$DIR/stamp" 2>/dev/null)" = "$stamp" ]; then tool_to_cache "$DIR" code-server "$stamp"; return; fi
  tool_from_cache "$DIR" code-server "$stamp" && return
  case "$(node --version)" in v20.*) ;; *) fail "code-server $VERSION needs Node.js 20 on the host (it has $(node --version))" ;; esac
  local need=""
  command -v rg >/dev/null || need="$need ripgrep"
  command -v patchelf >/dev/null || need="$need patchelf"
  [ -e /usr/include/krb5.h ] || need="$need libkrb5-dev"
  command -v g++ >/dev/null || need="$need g++ make python3"
  if [ -n "$need" ]; then is_debian_root || fail "building code-server needs:$need"; apt_install $need; fi
  step "installing code-server $VERSION from npm into .tools/code-server (first run only: about 3 minutes)"
  local start=$SECONDS work vscode
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cd "$work"
  echo '{"private":true}' >package.json
  npm install --no-audit --no-fund --ignore-scripts "code-server@$VERSION" >&2
  npm rebuild argon2 >&2
  vscode=node_modules/code-server/lib/vscode
  (cd "$vscode" && npm install --no-audit --no-fund --omit=dev --ignore-scripts) >&2
  mkdir -p "$vscode/node_modules/@vscode/ripgrep/bin"
  cp "$(command -v rg)" "$vscode/node_modules/@vscode/ripgrep/bin/rg"
  # node-pty's build runs `npx node-gyp`, which asks before installing unless told yes.
  (cd "$vscode" && npm_config_yes=true npm rebuild $NATIVE) >&2 || fail "rebuilding code-server's native modules failed (see above)"
  # The rest of its postinstall.sh.
  ln -sfn node_modules "$vscode/node_modules.asar"
  ln -sfn code-linux.sh "$vscode/bin/remote-cli/code-server"
  ln -sfn browser-linux.sh "$vscode/bin/helpers/browser.sh"
  (cd "$vscode/extensions" && npm install --no-audit --no-fund --omit=dev) >&2
  mkdir -p "$work/out"
  mv node_modules "$work/out/node_modules"
  carry "$work/out"
  echo "$stamp" >"$work/out/stamp"
  rm -rf "$DIR" && mkdir -p "$(dirname "$DIR")" && mv "$work/out" "$DIR"
  chmod -R a+rX "$DIR"
  tool_to_cache "$DIR" code-server "$stamp"
  step "installed code-server in $((SECONDS - start)) s"
}

mkdir -p "$TOOLS_DIR"
(flock 9 && build) 9>"$TOOLS_DIR/code-server.lock"
echo "$DIR"
