"""A stand-in kubelet (and binder) for tests against a real kube-apiserver with no nodes.

It registers fake nodes, binds unscheduled pods of its namespace to them round-robin (the
kube-scheduler's job; a pod requesting more than a node holds stays unbound, marked
Unschedulable as kube-scheduler would), and for every pod bound to one of its nodes it does
what a kubelet does: runs the container's command as a local process with the pod's env
(fieldRefs, envFrom Secrets and secretKeyRefs resolved; the pod IP is 127.0.0.1), writes the
pod status back through the API (Running, then Succeeded/Failed with the exit code), serves
the container log to the API server's `pods/log` proxy over HTTPS (kubelet_logs.py), and on
deletion sends SIGTERM, waits the grace period, SIGKILLs, then removes the pod. Images not in
--image are "not pullable" (ErrImagePull).

With --simulate, containers are not run (KWOK-style): pods go Running at once and stay
there, for benchmarks with thousands of pods.

    python -m tests.kube.kubelet --server URL --token T --namespace NS --nodes 4
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import itertools
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from appliance.backends.kubernetes.quantities import cpu_millis, memory_bytes
from tests.kube.kubelet_logs import LogServer

CONTAINER = "replica"
# What each fake node can hold. A pod requesting more than this (of either) is unschedulable.
NODE_ROOM = {"cpu": "64", "memory": "256Gi"}


def unfit(pod: dict[str, Any]) -> str:
    """The resource ("cpu", "memory") a pod requests more of than any node holds, or ""."""
    requests = [
        (c.get("resources") or {}).get("requests") or {} for c in pod["spec"]["containers"]
    ]
    cpu = sum(cpu_millis(str(r.get("cpu", "0"))) for r in requests)
    memory = sum(memory_bytes(str(r.get("memory", "0"))) for r in requests)
    if cpu > cpu_millis(NODE_ROOM["cpu"]):
        return "cpu"
    return "memory" if memory > memory_bytes(NODE_ROOM["memory"]) else ""


def termination_message(
    container: dict[str, Any], message_file: Path, log_path: Path, code: int
) -> str:
    """What a kubelet reports as a terminated container's message: its termination message
    file (at most 4096 bytes), else, with FallbackToLogsOnError and a failure, the tail of its
    log (at most 80 lines and 2048 bytes)."""
    message = message_file.read_bytes()[:4096].decode(errors="replace")
    fallback = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
    if not message and fallback and code != 0:
        tail = log_path.read_bytes()[-2048:].decode(errors="replace")
        message = "\n".join(tail.splitlines()[-80:])
    return message


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ns = args.namespace
        self.nodes = [f"{args.node_prefix}-{i:02d}" for i in range(1, args.nodes + 1)]
        self._next_node = itertools.cycle(self.nodes)
        self.http = httpx.AsyncClient(
            base_url=args.server,
            headers={"Authorization": f"Bearer {args.token}"},
            verify=False,
            timeout=30,
            limits=httpx.Limits(max_connections=64),
        )
        self.workdir = Path(args.workdir)
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.handled: set[str] = set()  # pod uids started (or refused)
        self.procs: dict[str, asyncio.subprocess.Process] = {}  # uid -> process
        self.deleting: set[str] = set()
        self.reported: dict[str, asyncio.Event] = {}  # uid -> the end was written to the API
        self.pending: set[asyncio.Task[None]] = set()

    # ---- nodes ------------------------------------------------------------------------------

    async def register_nodes(self, kubelet_port: int) -> None:
        async def register(name: str) -> None:
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"appliance.io/fake-node": "true"}},
            }
            r = await self.http.post("/api/v1/nodes", json=node)
            if r.status_code not in (201, 409):
                raise RuntimeError(f"node {name}: {r.status_code} {r.text}")
            status = {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
                    "capacity": {**NODE_ROOM, "pods": "500"},
                    "allocatable": {**NODE_ROOM, "pods": "500"},
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady",
                         "message": "stand-in kubelet", "lastHeartbeatTime": now(),
                         "lastTransitionTime": now()}
                    ],
                }
            }  # fmt: skip
            r = await self.http.patch(
                f"/api/v1/nodes/{name}/status",
                content=json.dumps(status),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            r.raise_for_status()
            # The API server's TaintNodesByCondition admission taints a new node not-ready
            # (NoSchedule); the node lifecycle controller lifts it once the node is Ready. No
            # controller manager runs here: do what it would.
            r = await self.http.patch(
                f"/api/v1/nodes/{name}",
                content=json.dumps({"spec": {"taints": None}}),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            r.raise_for_status()

        await asyncio.gather(*(register(n) for n in self.nodes))

    # ---- pods -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch the namespace's pods; resume after a broken watch, list again after a 410."""
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._relist()
                params = {
                    "watch": "true",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "300",
                }
                async with self.http.stream(
                    "GET", f"/api/v1/namespaces/{self.ns}/pods", params=params, timeout=None
                ) as response:
                    if response.status_code == 410:
                        version = None
                        continue
                    response.raise_for_status()
                    async for line in response.aiter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            version = None if obj.get("code") == 410 else version
                            break
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self.on_pod(obj)
            except httpx.HTTPError as e:  # the API server is away: try again shortly
                print(f"kubelet: watch failed ({e!r}); retrying", file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)

    async def _relist(self) -> str:
        r = await self.http.get(f"/api/v1/namespaces/{self.ns}/pods")
        r.raise_for_status()
        body = r.json()
        for pod in body["items"]:
            self.on_pod(pod)
        return str(body["metadata"]["resourceVersion"])

    def on_pod(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        node = spec.get("nodeName")
        if meta.get("deletionTimestamp"):
            if node in self.nodes and uid not in self.deleting:
                self.deleting.add(uid)
                self._spawn(self.stop_pod(pod))
            return
        if not node:
            if uid not in self.handled:
                self.handled.add(uid)
                self._spawn(self.bind(pod))
            return
        if node not in self.nodes or pod.get("status", {}).get("containerStatuses"):
            return
        if f"started:{uid}" in self.handled:
            return
        self.handled.add(f"started:{uid}")
        self._spawn(self.start_pod(pod))

    async def bind(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        too_big = unfit(pod)
        if too_big:  # what kube-scheduler says of a pod no node can hold; it stays unbound
            message = (
                f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} Insufficient "
                f"{too_big}. preemption: 0/{len(self.nodes)} nodes are available: "
                f"{len(self.nodes)} No preemption victims found for incoming pod."
            )
            status = {"status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": message, "lastTransitionTime": now()},
            ]}}  # fmt: skip
            await self.send(
                "PATCH",
                f"/api/v1/namespaces/{self.ns}/pods/{name}/status",
                content=json.dumps(status),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            return
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": next(self._next_node)},
        }
        r = await self.send(
            "POST", f"/api/v1/namespaces/{self.ns}/pods/{name}/binding", json=binding
        )
        if r.status_code not in (201, 409, 404):
            print(f"kubelet: binding {name}: {r.status_code} {r.text}", file=sys.stderr)

    async def start_pod(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        container = next(c for c in spec["containers"] if c["name"] == CONTAINER)
        image = container["image"]
        if image not in self.args.image:
            await self.patch_status(
                pod,
                "Pending",
                {"waiting": {"reason": "ErrImagePull",
                             "message": f"pull access denied for {image}: not found locally"}},
            )  # fmt: skip
            return
        if self.args.simulate:
            await self.patch_status(pod, "Running", {"running": {"startedAt": now()}})
            return
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        if "PYTHONPATH" in os.environ:  # the image's code is the checkout under test
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        for source in container.get("envFrom") or []:
            env.update(await self.secret_env(meta["namespace"], source["secretRef"]["name"]))
        cwd = tempfile.mkdtemp(prefix=f"{meta['name']}-", dir=self.workdir)
        # The container's terminationMessagePath is a file of the pod's own (here: in its
        # working directory; the env naming the path is pointed at it).
        message_path = container.get("terminationMessagePath", "/dev/termination-log")
        message_file = Path(cwd) / "termination-log"
        message_file.touch()
        for item in container.get("env") or []:
            reference = item.get("valueFrom", {}).get("secretKeyRef")
            if reference is not None:  # a key of a Secret: the pod fails to start without it
                env[item["name"]] = (await self.secret_env(meta["namespace"], reference["name"]))[
                    reference["key"]
                ]
                continue
            env[item["name"]] = self.env_value(pod, item)
            if env[item["name"]] == message_path:
                env[item["name"]] = str(message_file)
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        log_path = self.log_dir / f"{meta['namespace']}_{meta['name']}.log"
        with log_path.open("ab") as log_file:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.procs[meta["uid"]] = proc
        self.reported[meta["uid"]] = asyncio.Event()
        await self.patch_status(pod, "Running", {"running": {"startedAt": now()}})
        code = await proc.wait()
        if code < 0:
            code = 128 - code
        state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": now(),
                "finishedAt": now(),
            }
        }
        message = termination_message(container, message_file, log_path, code)
        if message:
            state["terminated"]["message"] = message
        # Also when the pod is being deleted: a kubelet reports how the container ended.
        await self.patch_status(pod, "Succeeded" if code == 0 else "Failed", state)
        self.reported[meta["uid"]].set()

    async def secret_env(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's keys as environment, as a kubelet reads it for envFrom (and each
        secretKeyRef)."""
        r = await self.http.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        r.raise_for_status()
        data = r.json().get("data") or {}
        return {key: base64.b64decode(value).decode() for key, value in data.items()}

    def env_value(self, pod: dict[str, Any], item: dict[str, Any]) -> str:
        if "valueFrom" not in item:  # the API server drops an empty `value`
            return str(item.get("value", ""))
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        return {
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"]["namespace"],
            "spec.nodeName": pod["spec"].get("nodeName", ""),
        }[path]

    async def patch_status(self, pod: dict[str, Any], phase: str, state: dict[str, Any]) -> None:
        meta = pod["metadata"]
        container = next(c for c in pod["spec"]["containers"] if c["name"] == CONTAINER)
        running = "running" in state
        status = {
            "status": {
                "phase": phase,
                "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": now(),
                "conditions": [
                    {"type": "Ready", "status": "True" if running else "False"},
                ],
                "containerStatuses": [
                    {
                        "name": CONTAINER,
                        "image": container["image"],
                        "imageID": "",
                        "ready": running,
                        "started": running,
                        "restartCount": 0,
                        "state": state,
                    }
                ],
            }
        }
        r = await self.send(
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            content=json.dumps(status),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if r.status_code not in (200, 404):
            print(f"kubelet: status of {meta['name']}: {r.status_code} {r.text}", file=sys.stderr)

    async def stop_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        proc = self.procs.pop(meta["uid"], None)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            grace = meta.get("deletionGracePeriodSeconds") or 30
            try:
                await asyncio.wait_for(proc.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        if proc is not None:  # report how the container ended before the final delete
            await self.reported[meta["uid"]].wait()
        # The kubelet's final delete: grace 0, only this incarnation of the pod.
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        await self.send(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            content=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )

    async def send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A write a kubelet must not lose: retried while the API server is away."""
        for _ in range(240):
            try:
                return await self.http.request(method, url, **kwargs)
            except httpx.TransportError:
                await asyncio.sleep(0.25)
        raise RuntimeError(f"{method} {url}: the API server stayed away for a minute")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def shutdown(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


async def main(args: argparse.Namespace) -> None:
    kubelet = Kubelet(args)
    logs = LogServer(kubelet.log_dir, kubelet.workdir)
    await kubelet.register_nodes(logs.port)
    print(f"kubelet ready: {len(kubelet.nodes)} nodes, logs on port {logs.port}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    runner = loop.create_task(kubelet.run())
    await stop.wait()
    runner.cancel()
    await kubelet.shutdown()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--server", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--node-prefix", default="fake-node")
    p.add_argument("--image", action="append", default=[], help="images that 'pull' (repeat)")
    p.add_argument("--workdir", default=tempfile.gettempdir())
    p.add_argument("--simulate", action="store_true", help="do not run containers (KWOK-style)")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
