#!/usr/bin/env bash
# Build (once) what the Kubernetes-backend tests run against: a real kube-apiserver from the
# k8s.io/kubernetes module pinned in go.mod here, and etcd from Debian's etcd-server.
#
#   deploy/kube-testenv/build.sh          # build if missing; print the env file path last
#   deploy/kube-testenv/build.sh node     # also what a real node needs (node.sh): kubelet,
#                                         # kube-controller-manager, kube-scheduler, kube-proxy,
#                                         # CoreDNS (./coredns) and a static pause (./pause)
#
# The binary is cached outside the repository, keyed by the Kubernetes version:
#   ${XDG_CACHE_HOME:-~/.cache}/appliance-kube/<version>/kube-apiserver
# The last line printed is the path of an env file (KUBE_APISERVER=..., ETCD=...) that the
# tests read (tests/kube/cluster.py). Exit code 3 with a message on stderr means "cannot run
# here" (no Go, no etcd, build failed); the tests then skip and say why.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/appliance-kube/$version"
binary="$cache/kube-apiserver"
envfile="$cache/env"
node=false
[ "${1:-}" = node ] && node=true

cannot() { echo "kube-testenv: cannot run here: $*" >&2; exit 3; }

if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "kube-testenv: installing etcd-server from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q etcd-server; } >&2 || cannot "apt-get install etcd-server failed"
  else
    cannot "etcd is not installed (apt-get install etcd-server)"
  fi
fi

# Stamp the release into the binaries, as the Kubernetes build does: clients (helm, kubectl)
# read the server version, and the kubelet reports it as the node's version.
minor="$(echo "$version" | cut -d. -f2)"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
build=""
trap '[ -z "$build" ] || rm -rf "$build"' EXIT

# go_build <module dir> <package> <output>: once, into the cache, from a copy of the module.
go_build() {
  local module="$1" package="$2" out="$3"
  [ -x "$out" ] && return 0
  command -v go >/dev/null 2>&1 || cannot "Go is not installed (needed to build $package)"
  mkdir -p "$cache"
  echo "kube-testenv: building $(basename "$out") from $package" >&2
  build="$(mktemp -d)"
  cp "$module"/go.mod "$module"/go.sum "$module"/*.go "$build/" 2>/dev/null \
    || cp "$module"/go.mod "$module"/*.go "$build/"
  ( cd "$build" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$package" ) >&2 \
    || cannot "go build $package failed (see above)"
  mv "$out.tmp" "$out"
  rm -rf "$build"
  build=""
}

[ -x "$binary" ] || echo "kube-testenv: the first kube-apiserver build takes ~6 min on 2 cores" >&2
go_build "$here" k8s.io/kubernetes/cmd/kube-apiserver "$binary"
if $node; then
  # ~90 s more over the API server's cached modules; CoreDNS ~80 s.
  for component in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    go_build "$here" "k8s.io/kubernetes/cmd/$component" "$cache/$component"
  done
  # Keyed by CoreDNS's own version too: a change of coredns/go.mod builds it again.
  coredns_version="$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' \
    "$here/coredns/go.mod")"
  go_build "$here/coredns" . "$cache/coredns-$coredns_version"
  ln -sf "coredns-$coredns_version" "$cache/coredns"
  go_build "$here/pause" . "$cache/pause"
fi

"$binary" --version | grep -qF "$version" || cannot "$binary does not report $version (delete it to rebuild)"
{
  echo "KUBE_VERSION=$version"
  echo "KUBE_APISERVER=$binary"
  echo "ETCD=$(command -v etcd)"
  for component in kubelet kube-controller-manager kube-scheduler kube-proxy coredns pause; do
    if [ -x "$cache/$component" ]; then
      echo "$(echo "$component" | tr a-z- A-Z_)=$cache/$component"
    fi
  done
} > "$envfile"
echo "$envfile"
