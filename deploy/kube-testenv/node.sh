#!/usr/bin/env bash
# A real single-node Kubernetes cluster inside this machine, for the tests that need real
# containers: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet on
# containerd + runc, a CNI bridge for pods, kube-proxy and CoreDNS. Nothing is pulled: the
# pause and CoreDNS images are built here from static binaries, and the appliance image is
# copied from the local Docker engine.
#
#   deploy/kube-testenv/node.sh up DIR [IMAGE...]   # start; print DIR/env (KUBECONFIG=...) last
#   deploy/kube-testenv/node.sh down DIR            # stop and remove everything `up` made
#   deploy/kube-testenv/node.sh purge               # what a node whose `down` never ran left
#
# Runs as root (it makes a bridge, iptables chains and mounts). Only one node at a time: the
# bridge, the pod range and the guard chain have fixed names. Addresses:
#   pods        10.245.0.0/24 on the bridge applnode0 (10.245.0.1, also the node's IP and the
#               API server's bind address); traffic from the pod range may only go back to
#               the bridge (a DROP rule keeps it off every other interface)
#   Services    10.96.0.0/16 (kubernetes 10.96.0.1, kube-dns 10.96.0.10), kube-proxy iptables
# Everything else listens on 127.0.0.1. Volumes: a default StorageClass `local` with
# hostPath PersistentVolumes under DIR/volumes (world-writable, as local-path-provisioner's).
#
# `down` stops, by the pids `up` recorded, what `up` started; removes only the chains it
# made (KUBE-*, CNI-*, APPLNODE-*), the bridge, the pods' network namespaces and mounts, the
# state the kubelet and CNI write outside DIR when it was not there before, and restores the
# sysctls the kubelet, kube-proxy and the bridge plugin change.
#
# `purge` is for a host where a node's programs were killed before `down` could run (a session
# or a CI job stopped mid-test): the kernel keeps its chains, bridge, netns and cgroups. With no
# kubelet, kube-proxy or kube-apiserver running on the host, it removes every chain of the
# node's prefixes, the bridge, the cni-* network namespaces and the empty k8s.io cgroups.
set -Eeuo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BRIDGE=applnode0
POD_CIDR=10.245.0.0/24
NODE_IP=10.245.0.1
SERVICE_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
NODE_NAME=appliance-node
GUARD=APPLNODE-GUARD
VOLUMES=8
PAUSE_IMAGE=registry.appliance.local/pause:3.10
COREDNS_IMAGE=registry.appliance.local/coredns:1.14.7
SYSCTLS="net.ipv4.ip_forward vm.overcommit_memory kernel.panic kernel.panic_on_oops
net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
net.ipv4.conf.all.route_localnet"
OUTSIDE_STATE="/var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /run/netns"
tools_dir="${HOME}/.cache/appliance-tools/kubectl-layer-2.2.2/bin"

log() { printf 'node.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,13p' "$0" >&2; exit 2; }

[ $# -ge 1 ] || usage
cmd="$1"
[ "$(id -u)" = 0 ] || die "run as root: the node makes a bridge, iptables chains and mounts"
if [ "$cmd" != purge ]; then
  [ $# -ge 2 ] || usage
  dir="$(mkdir -p "$2" && cd "$2" && pwd)"
  shift 2
fi

kubectl_() { "$tools_dir/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "$dir/containerd/containerd.sock" -n k8s.io "$@"; }

# wait_for <seconds> <what> <command...>: poll a condition (no fixed sleeps stand in for it).
wait_for() {
  local seconds="$1" what="$2" deadline
  shift 2
  deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after ${seconds} s (logs in $dir/logs)"
    check_alive
    sleep 0.2
  done
}

# spawn <name> <argv...>: start a component in its own session, log and pid in DIR.
spawn() {
  local name="$1"
  shift
  setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
}

check_alive() {
  local pidfile
  for pidfile in "$dir"/pids/*; do
    [ -e "$pidfile" ] || continue
    kill -0 "$(cat "$pidfile")" 2>/dev/null ||
      die "$(basename "$pidfile") exited; see $dir/logs/$(basename "$pidfile").log"
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- certificates and credentials ---------------------------------------------------------
make_pki() {
  local pki="$dir/pki"
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=appliance-test-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  # sign <name> <subject> [SAN]: a leaf certificate signed by the CA.
  sign() {
    local ext
    ext="$(mktemp)"
    if [ -n "${3:-}" ]; then echo "subjectAltName=$3" >"$ext"; else : >"$ext"; fi
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" \
      -out "$pki/$1.csr" 2>/dev/null
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
      -CAcreateserial -days 2 -extfile "$ext" -out "$pki/$1.crt" 2>/dev/null
    rm -f "$ext" "$pki/$1.csr"
  }
  sign apiserver /CN=kube-apiserver \
    "IP:$NODE_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # The API server's client certificate towards the kubelet (logs, exec, port-forward).
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  local who token name user group
  : >"$pki/tokens.csv"
  # name|user|group: a token per component, in a kubeconfig of its own.
  for who in "admin|admin|system:masters" "node|system:node:$NODE_NAME|system:nodes" \
    "controller-manager|system:kube-controller-manager|" \
    "scheduler|system:kube-scheduler|" "proxy|system:kube-proxy|"; do
    IFS='|' read -r name user group <<<"$who"
    token="$(openssl rand -hex 16)"
    echo "$token,$user,$user${group:+,\"$group\"}" >>"$pki/tokens.csv"
    kubeconfig "$dir/$name.kubeconfig" "$token"
  done
}

kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: appliance-node
  cluster: {server: "https://$NODE_IP:$api_port", certificate-authority: "$dir/pki/ca.crt"}
users:
- name: user
  user: {token: "$2"}
contexts:
- name: appliance-node
  context: {cluster: appliance-node, user: user, namespace: default}
current-context: appliance-node
EOF
  chmod 600 "$1"
}

# --- network ------------------------------------------------------------------------------
make_network() {
  ip link add "$BRIDGE" type bridge
  touch "$dir/bridge.made"
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local ipt
  for ipt in iptables; do
    $ipt -N "$GUARD"
    # Docker sets the FORWARD policy to DROP: pod-to-pod traffic on the bridge must pass.
    $ipt -A "$GUARD" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
    # Nothing from the pod range leaves through any other interface.
    $ipt -A "$GUARD" -s "$POD_CIDR" ! -o "$BRIDGE" -j DROP
    $ipt -A "$GUARD" -d "$POD_CIDR" ! -i "$BRIDGE" -j DROP
    $ipt -I FORWARD 1 -j "$GUARD"
  done
  mkdir -p "$dir/cni/net.d"
  cat >"$dir/cni/net.d/10-appliance.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "appliance-pods",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

# --- containerd and images ----------------------------------------------------------------
start_containerd() {
  local c="$dir/containerd"
  mkdir -p "$c/root" "$c/state" "$c/opt"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: runc must not try to lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF
  spawn containerd containerd --config "$c/config.toml"
  wait_for 30 containerd ctr_ version
}

# static_image <name> <binary> <path in image>: a one-binary image, into containerd.
static_image() {
  python3 "$here/static_image.py" "$1" "$2" "$3" | ctr_ images import - >/dev/null
}

load_image() {
  docker image inspect "$1" >/dev/null 2>&1 || die "image $1 is not in the local Docker engine"
  docker save "$1" | ctr_ images import - >/dev/null
}

# --- control plane ------------------------------------------------------------------------
start_control_plane() {
  local etcd_port peer_port
  etcd_port="$(free_port)" peer_port="$(free_port)"
  spawn etcd "$ETCD" --name node --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "node=http://127.0.0.1:$peer_port" --log-level warn
  wait_for 30 etcd curl -sf "http://127.0.0.1:$etcd_port/health"
  local pki="$dir/pki"
  spawn kube-apiserver "$KUBE_APISERVER" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --profiling=false -v=1
  wait_for 90 kube-apiserver kubectl_ get --raw /readyz
  spawn kube-controller-manager "$KUBE_CONTROLLER_MANAGER" \
    --kubeconfig "$dir/controller-manager.kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port 0 --use-service-account-credentials \
    --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
    --cluster-name appliance-node --allocate-node-cidrs=false --profiling=false
  spawn kube-scheduler "$KUBE_SCHEDULER" --kubeconfig "$dir/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$(free_port)" \
    --profiling=false
}

# --- the node -----------------------------------------------------------------------------
start_node() {
  mkdir -p "$dir/kubelet/pki" "$dir/pod-logs"
  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $(free_port)
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$dir/pki/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $dir/pod-logs
# Never garbage-collect the imported images, never evict for a full disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "0%", imagefs.available: "0%",
  nodefs.inodesFree: "0%"}
rotateCertificates: false
serializeImagePulls: false
# A Secret's or ConfigMap's new content reaches the pods' volumes at the pods' next sync: every
# 10 s instead of the default minute (a renewed certificate in tests/node is taken sooner).
syncFrequency: 10s
EOF
  spawn kubelet "$KUBELET" --config "$dir/kubelet/config.yaml" \
    --kubeconfig "$dir/node.kubeconfig" --root-dir "$dir/kubelet" \
    --cert-dir "$dir/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" -v=1
  cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: "$dir/proxy.kubeconfig"}
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$(free_port)
metricsBindAddress: 127.0.0.1:$(free_port)
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false}
# Leave the host's conntrack table settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  spawn kube-proxy "$KUBE_PROXY" --config "$dir/kube-proxy.yaml" -v=1
  wait_for 60 "node $NODE_NAME" kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
}

# --- cluster add-ons ----------------------------------------------------------------------
start_addons() {
  # hostPath volumes, world-writable as local-path-provisioner makes them (fsGroup does not
  # apply to hostPath, and the appliance runs as a non-root user).
  local i
  for i in $(seq 0 $((VOLUMES - 1))); do
    mkdir -p "$dir/volumes/pv$i"
    chmod 0777 "$dir/volumes/pv$i"
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-pv$i}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  hostPath: {path: "$dir/volumes/pv$i", type: Directory}
EOF
  done | kubectl_ apply -f - >/dev/null
  sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" \
    "$here/node-addons.yaml" | kubectl_ apply -f - >/dev/null
  wait_for 90 CoreDNS kubectl_ -n kube-system wait --for=condition=Available \
    deployment/coredns --timeout=1s
}

# --- teardown -----------------------------------------------------------------------------
stop_pid() {
  local pidfile="$dir/pids/$1" pid
  [ -e "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  # Still ours? Every component's command line names DIR (a reused pid would not).
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$dir/"; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + ${2:-15}))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# chains <iptables|ip6tables>: "table chain" for every chain of the node's prefixes.
chains() {
  local ipt="$1" table
  command -v "$ipt" >/dev/null || return 0
  for table in filter nat mangle raw; do
    "$ipt" -t "$table" -S 2>/dev/null |
      awk -v t="$table" '$1 == "-N" && $2 ~ /^(KUBE-|CNI-|APPLNODE-)/ {print t, $2}'
  done
}

# drop_chains <iptables|ip6tables> <file of chains to keep> <scratch file>: remove the chains
# (KUBE-*, CNI-*, ours) not listed as kept, the jumps to them first; every other chain and
# rule (Docker's) stays.
drop_chains() {
  local ipt="$1" keep="$2" drop="$3" table chain rule
  command -v "$ipt" >/dev/null || return 0
  chains "$ipt" | grep -vxF -f "$keep" >"$drop"
  while read -r table chain; do
    "$ipt" -t "$table" -S | grep -E -- "^-A [^ ]+ .*-j $chain( |\$)" |
      while read -r rule; do
        # `-S` quotes what needs it (comments): eval reads the rule back as iptables wrote it.
        eval "\"\$ipt\" -t \"\$table\" -D ${rule#-A }" 2>/dev/null
      done
  done <"$drop"
  while read -r table chain; do "$ipt" -t "$table" -F "$chain" 2>/dev/null; done <"$drop"
  while read -r table chain; do "$ipt" -t "$table" -X "$chain" 2>/dev/null; done <"$drop"
}

# drop_cgroups <file of cgroups to keep>: the containers' cgroups (containerd's CRI puts them
# under k8s.io), deepest first; rmdir leaves any that still hold a process.
drop_cgroups() {
  local cg
  for cg in /sys/fs/cgroup/*/k8s.io; do
    [ -d "$cg" ] || continue
    grep -qxF "$cg" "$1" && continue
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
  done
}

# drop_netns <file of names to keep>: network namespaces the pods left (cni-*, named by the CRI).
drop_netns() {
  local ns
  for ns in $(ls /run/netns 2>/dev/null | grep '^cni-'); do
    grep -qxF "$ns" "$1" && continue
    umount -l "/run/netns/$ns" 2>/dev/null
    rm -f "/run/netns/$ns"
  done
}

down() {
  set +e
  # Only what an `up` of this DIR made: it wrote the marker before making anything.
  [ -e "$dir/.node-sh" ] || die "$dir was not made by \`$0 up\`; nothing to tear down"
  if [ -e "$dir/pids/kube-apiserver" ] && [ -e "$dir/pids/kubelet" ]; then
    # The kubelet stops every pod's containers and sandbox (CNI DEL, the netns removed).
    # SIGKILL (0 s of grace) for what leaves nothing on the host: all of its state is in DIR,
    # removed below (kube-apiserver's graceful shutdown took 10-15 s of each teardown).
    stop_pid kube-controller-manager 0
    stop_pid kube-scheduler 0
    kubectl_ delete pods --all-namespaces --all --grace-period=0 --force --wait=false \
      >/dev/null 2>&1
    local deadline=$((SECONDS + 30))
    while [ "$SECONDS" -lt "$deadline" ] &&
      [ -n "$(ctr_ tasks ls -q 2>/dev/null)" ]; do sleep 0.2; done
  fi
  stop_pid kubelet
  stop_pid kube-proxy 0  # its chains are removed below
  if [ -e "$dir/pids/containerd" ]; then
    local task
    for task in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$task" 2>/dev/null; done
  fi
  stop_pid containerd
  # The shims our containerd started (their command line names our socket).
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $dir/containerd/containerd.sock"); do
    kill -KILL "$pid" 2>/dev/null
  done
  stop_pid kube-apiserver 0
  stop_pid etcd 0
  # Mounts under DIR (pod volumes, container root filesystems), deepest first.
  awk -v prefix="$dir/" 'index($2, prefix) == 1 {print $2}' /proc/self/mounts | sort -r |
    xargs -r -n1 umount -l 2>/dev/null
  drop_netns "$dir/netns.before"
  [ -e "$dir/bridge.made" ] && ip link del "$BRIDGE" 2>/dev/null
  drop_chains iptables "$dir/chains.iptables.before" "$dir/chains.iptables.drop"
  drop_chains ip6tables "$dir/chains.ip6tables.before" "$dir/chains.ip6tables.drop"
  drop_cgroups "$dir/cgroups.before"
  # The sysctls as they were, and what the kubelet and CNI wrote outside DIR.
  local line
  while read -r line; do sysctl -qw "$line" 2>/dev/null; done <"$dir/sysctl.before" 2>/dev/null
  local path
  for path in $OUTSIDE_STATE; do
    grep -qxF "$path" "$dir/outside.before" && continue
    [ -e "$path" ] && { awk -v p="$path/" 'index($2, p) == 1 {print $2}' /proc/self/mounts |
      sort -r | xargs -r -n1 umount -l 2>/dev/null; rm -rf --one-file-system "$path"; }
  done
  rm -f /var/lib/cni/results/appliance-pods-* 2>/dev/null
  rm -rf --one-file-system "$dir"
  log "down: $dir removed"
}

purge() {
  local running scratch
  running="$(ps -eo pid=,comm= |
    awk '$2 ~ /^(kubelet|kube-proxy|kube-apiserver)$/ {printf "%s ", $1}')"
  [ -z "$running" ] || die "a node is running (pids $running): \`$0 down DIR\` stops it"
  set +e  # as in down: list and remove all that can be, whatever one command says
  scratch="$(mktemp -d)"
  : >"$scratch/none"
  {
    chains iptables
    chains ip6tables
    ip link show "$BRIDGE" >/dev/null 2>&1 && echo "bridge $BRIDGE"
    ls -d /sys/fs/cgroup/*/k8s.io 2>/dev/null
    ls /run/netns 2>/dev/null | grep '^cni-'
  } >"$scratch/found"
  if [ -s "$scratch/found" ]; then
    log "purge: a node's leftovers, its programs gone: $(wc -l <"$scratch/found") items"
    drop_netns "$scratch/none"
    ip link del "$BRIDGE" 2>/dev/null
    drop_chains iptables "$scratch/none" "$scratch/drop"
    drop_chains ip6tables "$scratch/none" "$scratch/drop"
    drop_cgroups "$scratch/none"
  fi
  rm -rf "$scratch"
}

up() {
  [ ! -e "$dir/pids" ] || die "$dir already holds a node; run: $0 down $dir"
  ! ip link show "$BRIDGE" >/dev/null 2>&1 || die "bridge $BRIDGE exists: another node is up"
  local envfile missing=() tool
  for tool in containerd runc ctr ip iptables conntrack openssl curl setsid python3; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]} (apt-get install containerd runc \
iptables conntrack containernetworking-plugins docker.io)"
  envfile="$(bash "$here/build.sh" node | tail -1)"
  # shellcheck disable=SC1090
  . "$envfile"
  [ -x "${KUBELET:-}" ] && [ -x "${COREDNS:-}" ] || die "build.sh node did not build the node"
  mkdir -p "$dir/pids" "$dir/logs"
  # What was there before, then the marker `down` needs: from here on a failure (any
  # command, a `die`, a signal) tears down what was made.
  local name
  for name in $SYSCTLS; do
    [ -e "/proc/sys/${name//.//}" ] && echo "$name=$(sysctl -n "$name")"
  done >"$dir/sysctl.before"
  for name in $OUTSIDE_STATE; do [ -e "$name" ] && echo "$name"; done >"$dir/outside.before"
  ls /run/netns 2>/dev/null >"$dir/netns.before" || : >"$dir/netns.before"
  chains iptables >"$dir/chains.iptables.before"
  chains ip6tables >"$dir/chains.ip6tables.before"
  ls -d /sys/fs/cgroup/*/k8s.io 2>/dev/null >"$dir/cgroups.before" || : >"$dir/cgroups.before"
  touch "$dir/.node-sh"
  up_done=false
  trap '$up_done || { trap - EXIT; log "up failed; tearing down"; down; }' EXIT
  trap 'exit 1' INT TERM HUP
  api_port="$(free_port)"
  started=$SECONDS
  make_network
  make_pki
  start_containerd
  static_image "$PAUSE_IMAGE" "$PAUSE" /pause
  static_image "$COREDNS_IMAGE" "$COREDNS" /coredns
  for name in "$@"; do load_image "$name"; done  # Docker's, e.g. appliance:dev
  start_control_plane
  start_node
  log "node $NODE_NAME Ready after $((SECONDS - started)) s"
  start_addons
  log "CoreDNS ready after $((SECONDS - started)) s"
  up_done=true
  {
    echo "KUBECONFIG=$dir/admin.kubeconfig"
    echo "KUBE_SERVER=https://$NODE_IP:$api_port"
    echo "NODE_NAME=$NODE_NAME"
    echo "NODE_IP=$NODE_IP"
    echo "POD_CIDR=$POD_CIDR"
    echo "CONTAINERD_ADDRESS=$dir/containerd/containerd.sock"
    echo "KUBECTL=$tools_dir/kubectl"
    echo "HELM=$tools_dir/helm"
    echo "VOLUMES=$dir/volumes"
  } >"$dir/env"
  echo "$dir/env"
}

case "$cmd" in
up) up "$@" ;;
down) down ;;
purge) purge ;;
*) usage ;;
esac
