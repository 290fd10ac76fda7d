#!/usr/bin/env bash
# What the real-node tests may change on this machine, printed so .ci/run can check that
# teardown (deploy/kube-testenv/node.sh down) put it all back: iptables rules and chains,
# network links, mounts, network namespaces, the sysctls the kubelet and kube-proxy touch,
# the directories they write outside their own, and the processes of the node's programs.
set -uo pipefail
# A table that holds nothing but its built-in chains with policy ACCEPT is the same as no table:
# the first program to look at one (kube-proxy probing, on a fresh machine) makes it, empty.
for ipt in iptables-save ip6tables-save; do
  command -v "$ipt" >/dev/null && "$ipt" | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' | awk '
    /^\*/ { block = $0 "\n"; empty = 1; next }
    /^COMMIT/ { if (!empty) printf "%sCOMMIT\n", block; next }
    { block = block $0 "\n" }
    !/^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) ACCEPT *$/ { empty = 0 }'
done
ip -o link | awk -F': ' '{print "link", $2}' | sed 's/@.*//'
awk '{print "mount", $2}' /proc/self/mounts | sort
ls /run/netns 2>/dev/null | sed 's/^/netns /'
for s in net.ipv4.ip_forward vm.overcommit_memory kernel.panic kernel.panic_on_oops \
  net.bridge.bridge-nf-call-iptables net.ipv4.conf.all.route_localnet; do
  echo "sysctl $s=$(sysctl -n "$s" 2>/dev/null)"
done
for d in /var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers; do
  [ -e "$d" ] && echo "dir $d"
done
ls -d /sys/fs/cgroup/*/k8s.io 2>/dev/null | sed 's/^/cgroup /'
ps -eo comm= | grep -E '^(kubelet|kube-|etcd|containerd$|containerd-shim|coredns|pause)' | sort
exit 0
