"""`node.sh purge` on what a killed node leaves behind, in namespaces of the test's own.

A node killed before `node.sh down` could run (a stopped session, a cancelled CI job) leaves
its chains, bridge, pod netns and cgroups in the kernel, and .ci/run purges them first. Here
the leftovers are made in a new network, mount and pid namespace (its own iptables tables and
links, a tmpfs over /sys/fs/cgroup and /run/netns): purge runs for real and nothing of this
machine's is touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.kube.cluster import cannot_run
from tests.kube.node import NODE_SCRIPT

REQUIRE = "APPLIANCE_REQUIRE_NODE"

LEFTOVERS = """
set -e
mount -t tmpfs none /sys/fs/cgroup
mkdir -p /sys/fs/cgroup/cpu/k8s.io/pod1/ctr /sys/fs/cgroup/memory/k8s.io /sys/fs/cgroup/cpu/other
mkdir -p /run/netns && mount -t tmpfs none /run/netns
touch /run/netns/cni-1234 /run/netns/mine
ip link add applnode0 type bridge
iptables -N APPLNODE-GUARD
iptables -I FORWARD 1 -j APPLNODE-GUARD
iptables -N KUBE-SERVICES
iptables -A KUBE-SERVICES -j RETURN
iptables -A FORWARD -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
iptables -t nat -N KUBE-POSTROUTING
iptables -t nat -A POSTROUTING -j KUBE-POSTROUTING
iptables -t nat -N CNI-4f2a
iptables -N DOCKER-USER
iptables -A FORWARD -j DOCKER-USER
"""

AFTER = """
echo "--- rules"; iptables-save | grep -E '^[:-]' | sed 's/ \\[[0-9:]*\\]//'
echo "--- links"; ip -o link | awk -F': ' '{print $2}'
echo "--- cgroups"; find /sys/fs/cgroup -mindepth 1 -type d | sort
echo "--- netns"; ls /run/netns
"""


def _in_namespaces(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "bash", "-c", script],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def can_run() -> None:
    if os.geteuid() != 0:
        cannot_run("no purge test: it needs root (namespaces, iptables)", REQUIRE)
    missing = [tool for tool in ("unshare", "iptables", "ip") if shutil.which(tool) is None]
    if missing:
        cannot_run(f"no purge test: missing {', '.join(missing)}", REQUIRE)


def test_purge_removes_the_nodes_leftovers_and_nothing_else(can_run: None) -> None:
    done = _in_namespaces(f"{LEFTOVERS}\nbash {NODE_SCRIPT} purge\n{AFTER}")
    assert done.returncode == 0, done.stderr
    assert "purge: a node's leftovers" in done.stderr
    rules, links, cgroups, netns = (
        part.strip().splitlines() for part in done.stdout.split("--- ")[1:]
    )
    assert not [r for r in rules if any(p in r for p in ("KUBE-", "CNI-", "APPLNODE-"))], rules
    # Another program's chain and its jump stay, as every other rule does.
    assert ":DOCKER-USER -" in rules and "-A FORWARD -j DOCKER-USER" in rules, rules
    assert links == ["links", "lo"]  # the bridge is gone
    assert cgroups == ["cgroups", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu/other",
                       "/sys/fs/cgroup/memory"]  # fmt: skip
    assert netns == ["netns", "mine"]


def test_purge_refuses_while_a_nodes_program_runs(can_run: None) -> None:
    # A process named kubelet in the test's pid namespace: purge leaves everything alone.
    script = f"""{LEFTOVERS}
cp "$(command -v sleep)" /tmp/kubelet-$$ && mkdir -p /tmp/fake-$$ &&
  cp /tmp/kubelet-$$ /tmp/fake-$$/kubelet && rm /tmp/kubelet-$$
/tmp/fake-$$/kubelet 60 & pid=$!
rc=0; bash {NODE_SCRIPT} purge || rc=$?; echo "rc=$rc"
kill $pid; rm -rf /tmp/fake-$$
{AFTER}"""
    done = _in_namespaces(script)
    assert done.returncode == 0, done.stderr
    assert "rc=1" in done.stdout and "a node is running (pids" in done.stderr
    assert ":APPLNODE-GUARD -" in done.stdout and "applnode0" in done.stdout
