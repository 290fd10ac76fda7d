#!/usr/bin/env bash
# The Debian packages CI needs, each installed only when what it provides is missing, in one
# apt-get call; safe to run twice, and never a package that conflicts with what the machine has:
# - npm from Debian only when there is no npm at all (a machine with Node.js from elsewhere, e.g.
#   NodeSource's, has its own npm, and Debian's conflicts with that nodejs); Node.js's version
#   is checked by deploy/web/build.sh against package.json's "engines";
# - promtool is not installed here: deploy/tools/promtool.sh takes it out of Debian's package
#   without installing the Prometheus server and its service.
set -euo pipefail

need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# The real node: its runtime and network plumbing; etcd for every Kubernetes test.
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v etcd >/dev/null || need+=(etcd-server)
# The image: a Docker engine and a Debian base made by debootstrap (deploy/image/build.sh).
command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || need+=(docker.io)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
if ! command -v npm >/dev/null; then
  command -v node >/dev/null || need+=(nodejs)
  need+=(npm)
fi

if [ ${#need[@]} -eq 0 ]; then
  echo "ci: every Debian package needed is here"
  exit 0
fi
echo "ci: installing from Debian: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
