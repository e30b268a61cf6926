#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the tests of the
# Kubernetes sandbox provider: etcd and containerd from Debian, the control
# plane and the kubelet from one binary built from Go modules (infra/k8s-cluster).
# Idempotent; progress lines on stderr.
#
#   bash infra/k8s-cluster.sh build               builds kube (kube-apiserver, kube-controller-manager,
#                                                 kube-scheduler, kubelet, kubectl), the CNI plugins and
#                                                 the pause image into .tools/kubernetes (cached), installs
#                                                 etcd, containerd and runc if missing, prints that folder
#   bash infra/k8s-cluster.sh up [NAME]           starts cluster NAME (default "dev"), or finds it running;
#                                                 prints its kubeconfig's path once a pod can be created
#   bash infra/k8s-cluster.sh load NAME IMAGE...  copies Docker images into the node's containerd (no
#                                                 registry here); skips the ones it already holds
#   bash infra/k8s-cluster.sh down [NAME]         removes its pods and stops it; keeps its images
#
# Settings (up): K8S_PORT, the API server's port (default 16443); etcd, etcd's peers and the
# kubelet use the next three. K8S_POD_PIDS_LIMIT, the processes of one pod (default 1024):
# Kubernetes has no per-pod setting, only the kubelet's.
#
# Pods get no network beyond loopback (see containerd_config). Each cluster has its own
# containerd (socket and state under /run/drydock-k8s-NAME, images under
# /var/lib/drydock-k8s/NAME), its own cgroup parent and its own kubelet root, so
# several clusters and Docker's own containerd live side by side.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
K8S_VERSION=v1.37.2
CNI_VERSION=v1.9.1
# containerd runs the loopback plugin itself; host-local is the pods' only network (see containerd_config).
CNI_PLUGINS=(main/loopback ipam/host-local)
SRC="$ROOT/infra/k8s-cluster"
BIN_DIR="$TOOLS_DIR/kubernetes"
PAUSE_IMAGE=drydock.local/pause:1

build() {
  local stamp
  stamp=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" "$SRC/pause/pause.c" <(echo "$CNI_VERSION ${CNI_PLUGINS[*]}") | sha256sum | cut -c1-16)
  if [ -f "$BIN_DIR/stamp" ] && [ "$(cat "$BIN_DIR/stamp")" = "$stamp" ]; then tool_to_cache "$BIN_DIR" kubernetes "$stamp"; return; fi
  tool_from_cache "$BIN_DIR" kubernetes "$stamp" && return
  command -v go >/dev/null || fail "building Kubernetes needs a Go toolchain (>= 1.26)"
  command -v gcc >/dev/null || { is_debian_root && apt_install gcc libc6-dev; }
  step "building Kubernetes $K8S_VERSION (one binary) and the CNI plugins $CNI_VERSION into .tools/kubernetes (20 to 45 minutes the first time on a machine, by the load; a minute once its Go caches hold it)"
  local start=$SECONDS
  rm -rf "$BIN_DIR" && mkdir -p "$BIN_DIR/cni"
  # What upstream's build stamps in, so nodes and `kubectl version` report the release.
  local x="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37 -X $pkg.gitTreeState=clean"
  done
  # The machine's Go module and build caches, as every Go build here: about 8 GB the first
  # time, and a checkout that builds it again (a CI run) takes a minute instead of 20 or more.
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod
  (cd "$SRC" && nice -n 10 go build -trimpath -ldflags "-s -w$x" -o "$BIN_DIR/kube" .) >&2 \
    || fail "building Kubernetes failed (see above)"
  GOBIN="$BIN_DIR/cni" nice -n 10 go install -trimpath -ldflags "-s -w" \
    $(printf "github.com/containernetworking/plugins/plugins/%s@$CNI_VERSION " "${CNI_PLUGINS[@]}") >&2 \
    || fail "building the CNI plugins failed (see above)"
  pause_image >&2 || fail "building the pause image failed (see above)"
  ln -s kube "$BIN_DIR/kubectl"
  echo "$stamp" >"$BIN_DIR/stamp"
  tool_to_cache "$BIN_DIR" kubernetes "$stamp"
  step "built in $((SECONDS - start)) s"
}

# One build at a time on a machine: npm test's background job and a suite that needs the
# cluster may both ask (the later one waits, then finds the stamp).
build_once() {
  mkdir -p "$TOOLS_DIR"
  (flock 9 && build) 9>"$TOOLS_DIR/kubernetes.lock"
}

# The sandbox image as a `docker save` archive, written by hand: a static pause
# binary in one layer. No registry and no Docker are needed.
pause_image() {
  local dir
  dir=$(mktemp -d)
  mkdir "$dir/rootfs"
  gcc -static -Os -s -Wall -Wextra -o "$dir/rootfs/pause" "$SRC/pause/pause.c" || return
  tar -C "$dir/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$dir/layer.tar" pause || return
  local diff_id
  diff_id=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
  cat >"$dir/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]}}
EOF
  echo "[{\"Config\":\"config.json\",\"RepoTags\":[\"$PAUSE_IMAGE\"],\"Layers\":[\"layer.tar\"]}]" >"$dir/manifest.json"
  tar -C "$dir" --owner=0 --group=0 --mtime=@0 -cf "$BIN_DIR/pause.tar" manifest.json config.json layer.tar || return
  rm -rf "$dir"
}

# --- one cluster -------------------------------------------------------------

paths() {
  NAME=${1:-dev}
  [[ $NAME =~ ^[a-z0-9-]{1,20}$ ]] || fail "NAME: lower-case letters, digits and '-' (up to 20)"
  # Outside the project (like /var/lib/docker): tools that walk the tree must not find its images.
  DIR=/var/lib/drydock-k8s/$NAME
  STATE=$DIR/cluster # this start's state (etcd, certificates, kubelet): wiped at every fresh start
  RUN=/run/drydock-k8s-$NAME
  SOCK=$RUN/containerd.sock
  # The API server reaches the kubelet (exec, logs) at the node's host name, and a
  # kubelet refuses a loopback node IP: so the node is "localhost", in every cluster.
  NODE=localhost
  CGROUP=drydock-k8s-$NAME
  PKI=$STATE/pki
}

kubectl_() { "$BIN_DIR/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# A daemon of this cluster: its pid file names a live process whose command line
# holds this cluster's folder (a recycled pid does not count).
alive() {
  local pid
  pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$DIR"
}

# Returns once the daemon runs (or ended): until the forked shell has exec'd it, the pid's
# command line is this script's, and alive() took that for a dead daemon (a cluster that
# "exited while waiting for etcd" on a loaded machine: 2 checks in 200 right after a start).
daemon() {
  local name=$1 pid deadline=$((SECONDS + 30))
  shift
  setsid nohup "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$RUN/$name.pid"
  # Until it runs, ends, or 30 s passed (this wait must end whatever the daemon does).
  while ! alive "$name" && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
}

stop() {
  alive "$1" || return 0
  local pid
  pid=$(cat "$RUN/$1.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

# wait_for WHAT DAEMON SECONDS COMMAND...: until COMMAND succeeds, while DAEMON lives.
wait_for() {
  local what=$1 daemon=$2 deadline=$((SECONDS + $3))
  shift 3
  until "$@" >/dev/null 2>&1; do
    alive "$daemon" || fail "$daemon exited while waiting for $what (see $DIR/logs/$daemon.log): $(tail -3 "$DIR/logs/$daemon.log" 2>/dev/null)"
    [ $SECONDS -lt $deadline ] || fail "$what: not within $3 s (see $DIR/logs/$daemon.log)"
    sleep 0.3
  done
}

pki() {
  mkdir -p "$PKI"
  key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$1.key"; }
  cert() { # NAME SUBJECT EXTENSION...
    key "$1"
    openssl req -new -key "$PKI/$1.key" -subj "$2" \
      | openssl x509 -req -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 365 -out "$PKI/$1.crt" \
        -extfile <(printf '%s\n' "${@:3}") 2>/dev/null
  }
  key ca
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=drydock-k8s-$NAME" -days 3650 -out "$PKI/ca.crt"
  # The API server's and the kubelet's serving certificate: both listen on 127.0.0.1.
  cert server /CN=kube-apiserver extendedKeyUsage=serverAuth \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1"
  # The operator's identity, also used by the controller manager, the scheduler and
  # the API server's calls to the kubelet (exec, logs).
  cert admin /O=system:masters/CN=drydock-admin extendedKeyUsage=clientAuth
  cert node "/O=system:nodes/CN=system:node:$NODE" extendedKeyUsage=clientAuth
  key service-accounts
  openssl pkey -in "$PKI/service-accounts.key" -pubout -out "$PKI/service-accounts.pub"
}

kubeconfig() { # NAME (a certificate in $PKI)
  cat >"$STATE/$1.kubeconfig" <<EOC
apiVersion: v1
kind: Config
clusters:
  - name: $NAME
    cluster:
      server: https://127.0.0.1:$PORT
      certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
  - name: $1
    user:
      client-certificate-data: $(base64 -w0 "$PKI/$1.crt")
      client-key-data: $(base64 -w0 "$PKI/$1.key")
contexts:
  - name: $NAME
    context: { cluster: $NAME, user: $1 }
current-context: $NAME
EOC
}

# containerd with only the CRI's needs; everything it keeps lives under $DIR and $RUN.
containerd_config() {
  cat >"$STATE/containerd.toml" <<EOC
version = 2
root = "$DIR/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  netns_mounts_under_state_dir = true
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its OOM score below
  # containerd's own (the runtime asks -998 for a pod's sandbox): clamp instead of failing.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$BIN_DIR/cni"
    conf_dir = "$STATE/cni"
    max_conf_num = 1
EOC
  # No network at all: a pod has only the loopback interface the runtime sets up.
  # The runtime insists on an address for each pod from its network plugin, so the
  # only plugin is the IPAM one: it hands out a link-local address and creates no
  # interface. The pod's IP names nothing, so nothing may connect to it (no
  # httpGet or tcpSocket probes).
  mkdir -p "$STATE/cni"
  cat >"$STATE/cni/10-drydock-none.conflist" <<EOC
{"cniVersion": "1.0.0", "name": "drydock-none", "plugins": [{"type": "host-local",
  "ipam": {"dataDir": "$STATE/cni-ipam", "ranges": [[{"subnet": "169.254.200.0/22"}]]}}]}
EOC
}

kubelet_config() {
  cat >"$STATE/kubelet.yaml" <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $((PORT + 3))
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $PKI/ca.crt }
authorization: { mode: Webhook }
tlsCertFile: $PKI/server.crt
tlsPrivateKeyFile: $PKI/server.key
containerRuntimeEndpoint: unix://$SOCK
# This machine mounts cgroup v1, which the kubelet refuses unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/volume-plugins
# Images come from 'load', never from a registry: never collect them, and never
# evict for a disk others fill. No disk signal at all ("0%" turns one off): under
# disk pressure the kubelet taints the node for at least five minutes and deletes
# every image no pod uses, the pause image too (containerd 1.6 does not pin it, and
# the kubelet spares only what the runtime pins), after which no pod sandbox can be
# made (it cannot be pulled) and every pod waits in ContainerCreating for ever.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  imagefs.inodesFree: "0%"
# A fork bomb in a pod stops here: the only pids limit a pod can have.
podPidsLimit: ${K8S_POD_PIDS_LIMIT:-1024}
EOC
}

start_containerd() {
  containerd_config
  step "starting containerd (log: $DIR/logs/containerd.log)"
  daemon containerd containerd --config "$STATE/containerd.toml"
  wait_for containerd containerd 30 ctr_ version
  if [ -n "$(ctr_ containers ls -q)" ]; then
    # Pods of a start that was never torn down: remove them, then restart so the
    # runtime forgets them too.
    remove_containers
    stop containerd
    daemon containerd containerd --config "$STATE/containerd.toml"
    wait_for containerd containerd 30 ctr_ version
  fi
  pause_loaded
}

# The pause image, imported again if anything removed it: without it no pod can start.
pause_loaded() {
  ctr_ images ls -q | grep -qxF "$PAUSE_IMAGE" || ctr_ images import "$BIN_DIR/pause.tar" >/dev/null
}

start_control_plane() {
  local etcd=http://127.0.0.1:$((PORT + 1)) peer=http://127.0.0.1:$((PORT + 2))
  step "starting etcd, the API server, the controller manager and the scheduler (logs: $DIR/logs)"
  daemon etcd etcd --name "drydock-$NAME" --data-dir "$STATE/etcd" --logger zap --log-level warn \
    --listen-client-urls "$etcd" --advertise-client-urls "$etcd" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "drydock-$NAME=$peer"
  wait_for etcd etcd 30 curl -fsS "$etcd/health"
  daemon kube-apiserver "$BIN_DIR/kube" kube-apiserver --etcd-servers="$etcd" \
    --bind-address=127.0.0.1 --secure-port="$PORT" --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none --service-cluster-ip-range=10.96.0.0/24 \
    --tls-cert-file="$PKI/server.crt" --tls-private-key-file="$PKI/server.key" --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=Hostname \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$PKI/service-accounts.pub" \
    --service-account-signing-key-file="$PKI/service-accounts.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --profiling=false
  wait_for "the API server" kube-apiserver 120 kubectl_ get --raw /readyz
  daemon kube-controller-manager "$BIN_DIR/kube" kube-controller-manager --kubeconfig="$STATE/admin.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false --use-service-account-credentials=false \
    --service-account-private-key-file="$PKI/service-accounts.key" --root-ca-file="$PKI/ca.crt" --profiling=false
  daemon kube-scheduler "$BIN_DIR/kube" kube-scheduler --kubeconfig="$STATE/admin.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false --profiling=false
}

# The kubelet's cgroup parent, its own per cluster: a kubelet removes the pod
# cgroups it does not know of under its parent.
make_cgroups() {
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    mkdir -p "/sys/fs/cgroup/$CGROUP"
    echo "+cpu +cpuset +memory +pids" >"/sys/fs/cgroup/$CGROUP/cgroup.subtree_control"
    return
  fi
  local h
  for h in /sys/fs/cgroup/*/; do
    mkdir -p "$h$CGROUP"
    if [ -f "${h}cpuset.cpus" ]; then
      cat "${h}cpuset.cpus" >"$h$CGROUP/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$CGROUP/cpuset.mems"
    fi
  done
}

node_ready() {
  [ "$(kubectl_ get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# Host-wide settings the kubelet changes once, at its start, for its pods' sake.
KERNEL_TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

start_kubelet() {
  make_cgroups
  kubelet_config
  kubeconfig node
  local saved=() i
  for i in "${KERNEL_TUNABLES[@]}"; do saved+=("$(cat "/proc/sys/$i")"); done
  step "starting the kubelet (node $NODE)"
  daemon kubelet "$BIN_DIR/kube" kubelet --config="$STATE/kubelet.yaml" --kubeconfig="$STATE/node.kubeconfig" \
    --root-dir="$STATE/kubelet" --hostname-override="$NODE"
  wait_for "node $NODE to be ready" kubelet 120 node_ready
  # This machine is shared: put back what the kubelet changed for everyone.
  for i in "${!KERNEL_TUNABLES[@]}"; do
    [ "$(cat "/proc/sys/${KERNEL_TUNABLES[i]}")" = "${saved[i]}" ] || echo "${saved[i]}" >"/proc/sys/${KERNEL_TUNABLES[i]}"
  done
  # The admission of every pod needs its namespace's default service account.
  wait_for "the default service account" kube-controller-manager 60 kubectl_ get serviceaccount default
}

requirements() {
  [ "$(id -u)" = 0 ] || fail "a kubelet needs root"
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ ${#missing[@]} -eq 0 ] && return
  is_debian_root || fail "the cluster needs ${missing[*]}: install them"
  apt_install "${missing[@]}"
}

DAEMONS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

running() {
  local d
  for d in "${DAEMONS[@]}"; do alive "$d" || return 1; done
  PORT=$(cat "$STATE/port") && node_ready
}

up() {
  paths "${1:-}"
  build
  requirements
  if running; then echo "$STATE/admin.kubeconfig"; return; fi
  teardown # what an earlier start left
  PORT=${K8S_PORT:-16443}
  local start=$SECONDS
  mkdir -p "$STATE" "$RUN" "$DIR/logs"
  echo "$PORT" >"$STATE/port"
  pki
  kubeconfig admin
  start_containerd
  start_control_plane
  start_kubelet
  step "Kubernetes $K8S_VERSION cluster '$NAME' is up in $((SECONDS - start)) s"
  echo "$STATE/admin.kubeconfig"
}

remove_containers() {
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$id" >/dev/null 2>&1 || true; done
}

# Everything a start left, running or not: pods, daemons, mounts, cgroups, state.
# The images stay (under $DIR/containerd).
teardown() {
  stop kubelet
  if alive containerd; then remove_containers; fi
  local d pid
  for d in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$d"; done
  # A shim outlives containerd by design (and keeps no pid file): each of this
  # cluster's names its containerd's socket, which no other process does.
  for d in /proc/[0-9]*; do
    if tr '\0' ' ' 2>/dev/null <"$d/cmdline" | grep -qF -- "-address $SOCK "; then kill -KILL "${d#/proc/}" || true; fi
  done
  awk -v a="$DIR/" -v b="$RUN/" 'index($5, a) == 1 || index($5, b) == 1 { print $5 }' /proc/self/mountinfo \
    | sort -r | while read -r d; do umount -l "$d" 2>/dev/null || true; done
  remove_cgroups
  rm -rf "$STATE" "$RUN"
}

remove_cgroups() {
  local dirs=() d pid
  for d in /sys/fs/cgroup/"$CGROUP" /sys/fs/cgroup/*/"$CGROUP"; do if [ -d "$d" ]; then dirs+=("$d"); fi; done
  [ ${#dirs[@]} -eq 0 ] && return
  # Processes of this cluster's pods that outlived their containers.
  for pid in $(find "${dirs[@]}" -name cgroup.procs -exec cat {} +); do kill -KILL "$pid" 2>/dev/null || true; done
  local left
  for _ in $(seq 1 25); do
    find "${dirs[@]}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    left=0
    for d in "${dirs[@]}"; do if [ -d "$d" ]; then left=1; fi; done
    [ $left = 0 ] && return
    sleep 0.2
  done
  step "warning: could not remove cgroups ${dirs[*]}"
}

down() {
  paths "${1:-}"
  teardown
  step "cluster '$NAME' is down"
}

ID_LABEL=drydock.docker-id

# A Docker image reference as containerd names it (docker.io/library/... for short names).
image_ref() {
  local ref=$1
  if [[ $ref != */* ]]; then
    ref=docker.io/library/$ref
  elif [[ ${ref%%/*} != *[.:]* && ${ref%%/*} != localhost ]]; then
    ref=docker.io/$ref
  fi
  [[ ${ref##*/} == *[:@]* ]] || ref=$ref:latest
  echo "$ref"
}

load() {
  paths "${1:-}"
  shift || true
  alive containerd || fail "cluster '$NAME' is not running (bash infra/k8s-cluster.sh up $NAME)"
  pause_loaded
  local image ref old id loaded=()
  for image in "$@"; do
    ref=$(image_ref "$image")
    # Docker's image id, kept as a label: a rebuild under the same tag (drydock:<version>) is loaded again.
    id=$(docker image inspect -f '{{.Id}}' "$image") || fail "no image $image in Docker"
    ctr_ images ls "name==$ref" | grep -qF "$ID_LABEL=$id" && continue
    step "loading $image into cluster '$NAME'"
    # The build this replaces keeps a name until the new one is unpacked: the import
    # renames first and unpacks after, reusing each layer the node has, and containerd
    # collects what no image names, so a layer only the old build held could go in
    # between ("parent snapshot ... does not exist").
    if ctr_ images ls -q "name==$ref" | grep -q .; then
      ctr_ images tag --force "$ref" "$ref-replaced" >/dev/null
    fi
    docker save "$image" | ctr_ images import - >/dev/null || fail "loading $image failed"
    ctr_ images label "$ref" "$ID_LABEL=$id" >/dev/null
    loaded+=("$ref")
  done
  # One tag per repository, dropped once every import is done (and waited for, so
  # no collection runs under a later load): the node's disk holds what the tests use
  # now, not every build they ever used.
  for ref in "${loaded[@]}"; do
    for old in $(ctr_ images ls -q | grep -F "${ref%:*}:" | grep -vxF "$ref"); do
      if [ "${old%:*}" = "${ref%:*}" ]; then ctr_ images rm --sync "$old" >/dev/null; fi
    done
  done
  prune_images
}

# The runtime names each image by its ID too; drop those no tag points at any more,
# so that the image's content goes.
prune_images() {
  local named ref digest
  named=$(ctr_ images ls | awk 'NR > 1 && $1 !~ /^sha256:/ { print $3 }')
  ctr_ images ls | awk 'NR > 1 && $1 ~ /^sha256:/ { print $1, $3 }' | while read -r ref digest; do
    if ! grep -qxF "$digest" <<<"$named"; then ctr_ images rm --sync "$ref" >/dev/null; fi
  done
}

case "${1:-}" in
  build) build_once && requirements && echo "$BIN_DIR" ;;
  up) up "${2:-}" ;;
  down) down "${2:-}" ;;
  load) shift && load "$@" ;;
  *) fail "usage: infra/k8s-cluster.sh build | up [NAME] | load NAME IMAGE... | down [NAME]" ;;
esac
