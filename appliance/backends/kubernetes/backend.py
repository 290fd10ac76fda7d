"""Replicas as Kubernetes pods: the Backend protocol over the Kubernetes API.

One watch on the coordinator's replica pods (by label, from a resourceVersion) turns pod
status into replica events. A watch that ends or breaks resumes from the last resourceVersion
it saw, as client-go's reflector does; when that version is too old ("410 Gone"), it starts
over from a fresh list, diffed against what was seen, so no transition is lost (a pod that
vanished while nobody watched counts as deleted). A replica announces STARTED once and
EXITED once.

Pod logs are read through the API while the pods exist; teardown copies each replica's log to
<log_dir>/<job>/logs/<replica>.log before deleting its pod, so `csctl logs` and log-export keep
working after a job ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from appliance.backends.base import (
    OptionalParts,
    ReplicaEvent,
    ReplicaEventKind,
    no_identity,
    no_secrets,
)
from appliance.backends.kubernetes import logs
from appliance.backends.kubernetes import manifests as m
from appliance.backends.kubernetes.capacity import fit_problem
from appliance.backends.kubernetes.client import (
    KubeApi,
    KubeError,
    KubeUnavailable,
    WatchExpired,
)
from appliance.backends.kubernetes.lease import KubeLeaseLock
from appliance.backends.kubernetes.status import UNSCHEDULABLE, PodState, PodView, view_of
from appliance.domain.inventory import Node
from appliance.domain.job import Job, Replica
from appliance.domain.leadership import LeaseLock

log = logging.getLogger(__name__)
# API calls in flight at once for pod creates, deletes and log copies, across all jobs: a mass
# cancel must queue here rather than time out at the API server.
API_CONCURRENCY = 32
TEARDOWN_EXTRA_SECONDS = 30.0
WATCH_RETRY_SECONDS = 1.0
ARCHIVE_LIMIT_BYTES = 64 << 20


class KubernetesBackend(OptionalParts):
    def __init__(
        self,
        api: KubeApi,
        template: m.PodTemplate,
        log_dir: Path,
        *,
        clean_pod_policy: str = "all",
        pending_timeout: float = 300.0,
        watch_timeout_seconds: int = 300,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.template = template
        self.log_dir = log_dir
        self.clean_pod_policy = clean_pod_policy
        self.pending_timeout = pending_timeout
        self.start_timeout = pending_timeout  # a pod may wait this long, then fails its job
        self.watch_timeout_seconds = watch_timeout_seconds
        self.clock = clock
        self.watch_restarts: collections.Counter[str] = collections.Counter()
        self._views: dict[str, PodView] = {}  # pod name -> last seen
        self._started: set[str] = set()  # pod names whose STARTED was announced
        self._exited: set[str] = set()  # ... whose EXITED was announced
        self._waiting_since: dict[str, float] = {}
        self._away_codes: dict[str, dict[str, int]] = {}  # job -> replica -> code, at adopt
        self._away_errors: dict[tuple[str, str], str] = {}  # (job, replica) -> its error line
        self._events: asyncio.Queue[ReplicaEvent] = asyncio.Queue()
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self._watching = False
        self._slots = asyncio.Semaphore(API_CONCURRENCY)
        self.replica_secrets: Callable[[str, int], Mapping[str, str]] = no_secrets
        self.replica_identity: Callable[[str, int, str], Mapping[str, str]] = no_identity

    @property
    def coordinator_address(self) -> str:
        return self.template.coordinator_address

    @coordinator_address.setter
    def coordinator_address(self, address: str) -> None:
        if not self.template.coordinator_address:  # an explicit setting wins over the default
            self.template = dataclasses.replace(self.template, coordinator_address=address)

    # ---- protocol -------------------------------------------------------------------------

    async def launch(self, job: Job, replicas: Sequence[Replica]) -> None:
        await self._ensure_watching()
        if job.attempt > 1:  # the logs kept of the attempt before stay, under its number
            names = [r.name for r in replicas]
            await asyncio.to_thread(logs.set_aside, self.log_dir, job.id, names, job.attempt - 1)
        owner = await self.api.create("ConfigMap", m.config_map(job, self.api.namespace))
        uid = owner["metadata"]["uid"]
        await self.api.create("Service", m.headless_service(job.id, self.api.namespace, uid))
        secrets = self.replica_secrets(job.id, job.attempt)
        # Each replica's own certificate, in the same Secret under keys of its own.
        identities = {
            r.name: self.replica_identity(job.id, job.attempt, r.name) for r in job.replicas
        }
        certified = [name for name, env in identities.items() if env]
        data = m.credentials_data(secrets, identities)
        secret = m.credentials_secret(job.id, self.api.namespace, uid, data)
        found = await self.api.create("Secret", secret)
        if not m.is_credentials_secret(found, uid, secrets, certified):
            # Made by someone else ahead of us (job ids are seen while queued): its token
            # would be theirs. The job fails rather than run on it.
            raise RuntimeError(
                f"a Secret {m.secret_name(job.id)} the coordinator did not make is in the way"
            )
        await self.api.create(
            "NetworkPolicy", m.peers_only_policy(job.id, self.api.namespace, uid)
        )

        async def create(replica: Replica) -> None:
            async with self._slots:
                held = [*secrets, *identities.get(replica.name, {})]
                pod = m.replica_pod(job.id, replica, self.template, uid, job.attempt, held)
                await self.api.create("Pod", pod)

        missing = [
            r for r in replicas if m.pod_name(job.id, r.name, job.attempt) not in self._views
        ]
        await asyncio.gather(*(create(r) for r in missing))

    async def observe(self) -> AsyncIterator[ReplicaEvent]:
        while True:
            yield await self._events.get()

    async def teardown(self, job_id: str, *, failed: bool = False) -> None:
        """Delete the job's pods (with the grace period), its Service, credentials Secret,
        NetworkPolicy and ConfigMap.

        With the keep-failed policy, a failed job's pods all stay (and so does the ConfigMap
        that owns them) for `kubectl logs` and `kubectl describe`; replicas still running stop
        by themselves (their heartbeat says the job is over). Deleting the ConfigMap removes
        them (`kubectl delete configmap,pod -l appliance.io/job-id=<job>`).
        """
        pods = [v for v in self._views.values() if v.job_id == job_id]
        await asyncio.gather(*(self._archive_log(v) for v in pods))
        keep = failed and self.clean_pod_policy == "keep-failed"
        grace = int(self.template.grace_seconds + 0.999)
        async with self._slots:
            if not keep:
                await self.api.delete_collection("Pod", m.selector_of_job(job_id), grace)
            await self.api.delete("Service", m.service_name(job_id))
            # Kept pods got their credentials when their containers started; a kept pod that
            # never started cannot start without them (nor should it, for an ended job).
            await self.api.delete("Secret", m.secret_name(job_id))
            await self.api.delete("NetworkPolicy", m.network_policy_name(job_id))
            if not keep:
                await self.api.delete("ConfigMap", m.config_map_name(job_id))

        def gone() -> bool:
            return keep or not any(v.job_id == job_id for v in self._views.values())

        try:
            async with asyncio.timeout(self.template.grace_seconds + TEARDOWN_EXTRA_SECONDS):
                async with self._changed:
                    await self._changed.wait_for(gone)
        except TimeoutError:
            log.warning("pods of %s still exist after teardown; the next sweep retries", job_id)
            raise
        self._forget(job_id)

    async def adopt(self) -> dict[str, set[str]]:
        """List the replica pods (and job ConfigMaps) left by a previous coordinator. What they
        did while nobody watched is not announced; a backend that watches already only reports
        them (its watch announces each change in order: one taken as seen would never be)."""
        items, version = await self.api.list("Pod", m.REPLICA_SELECTOR)
        found: dict[str, set[str]] = {}
        for view in filter(None, map(view_of, items)):
            found.setdefault(view.job_id, set())
            if view.state is not PodState.ENDED:
                found[view.job_id].add(view.replica)
            if self._watching:
                continue
            self._views[view.name] = view
            if view.state is not PodState.WAITING:
                self._started.add(view.name)
            if view.state is PodState.ENDED:
                self._exited.add(view.name)
                if view.exit_code is not None:
                    self._away_codes.setdefault(view.job_id, {})[view.replica] = view.exit_code
                    self._away_errors[(view.job_id, view.replica)] = view.last_error
        owners, _ = await self.api.list("ConfigMap", m.REPLICA_SELECTOR)
        for owner in owners:  # a job whose pods are gone but whose objects are not
            job_id = (owner["metadata"].get("labels") or {}).get(m.LABEL_JOB)
            if job_id:
                found.setdefault(job_id, set())
        self._start_watch(version)
        return found

    def exit_codes(self, job_id: str) -> dict[str, int]:
        return dict(self._away_codes.get(job_id, {}))

    async def away_error(self, job_id: str, replica: str) -> str:
        return self._away_errors.get((job_id, replica), "")

    async def log_tail(self, job_id: str, replica: str, lines: int) -> str:
        archived = logs.kept_path(self.log_dir, job_id, replica)
        if await asyncio.to_thread(archived.exists):
            text = (await asyncio.to_thread(archived.read_bytes)).decode(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        try:
            text = await self.api.pod_log(self._pod_of(job_id, replica), tail_lines=lines)
        except (KubeError, KubeUnavailable) as e:
            return f"(log unavailable: {e})"
        return text.rstrip("\n")

    def _pod_of(self, job_id: str, replica: str) -> str:
        """The pod of the job's latest attempt the watch knows for `replica` (else the name
        the first attempt's would have)."""
        known = [v for v in self._views.values() if v.job_id == job_id and v.replica == replica]
        if not known:
            return m.pod_name(job_id, replica, 1)
        return max(known, key=lambda v: v.attempt).name

    async def _archive_log(self, view: PodView) -> None:
        """Keep the replica's log before its pod (and with it the log) is deleted."""
        try:
            async with self._slots:
                text = await self.api.pod_log(view.name, limit_bytes=ARCHIVE_LIMIT_BYTES)
        except (KubeError, KubeUnavailable) as e:
            log.warning("could not keep the log of %s: %s", view.name, e)
            return
        path = logs.kept_path(self.log_dir, view.job_id, view.replica)
        await asyncio.to_thread(logs.write_atomically, path, text.encode())

    async def read_log(self, job_id: str, replica: str, offset: int) -> tuple[str, int]:
        archived = logs.kept_path(self.log_dir, job_id, replica)
        if await asyncio.to_thread(archived.exists):  # the pod is gone (or going)
            return logs.complete_lines(
                await asyncio.to_thread(logs.read_from, archived, offset), offset
            )
        try:
            text = await self.api.pod_log(
                self._pod_of(job_id, replica), limit_bytes=offset + logs.READ_CHUNK
            )
        except (KubeError, KubeUnavailable):
            return "", offset
        return logs.complete_lines(text.encode()[offset:], offset)

    def lease_lock(self, name: str) -> LeaseLock | None:
        """The election lease as a Lease object beside the replica pods."""
        return KubeLeaseLock(self.api, name)

    async def fit_problem(self, pool: Sequence[Node]) -> str | None:
        """None when the pool's largest job fits the nodes' allocatable room (capacity.py);
        else why not, or why it could not be checked."""
        try:
            nodes = await self.api.list_nodes()
        except (KubeError, KubeUnavailable) as e:
            return (
                f"cannot check that the pool's largest job fits the nodes: listing nodes "
                f"failed ({e}); the chart's rbac.readNodes lets the coordinator list them"
            )
        return fit_problem(pool, self.template.requests_of, nodes)

    def health(self) -> str | None:
        if self.api.last_error:
            return f"Kubernetes API: {self.api.last_error}"
        return None

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.api.close()

    # ---- the watch ----------------------------------------------------------------------------

    async def _ensure_watching(self) -> None:
        if not self._watching:
            version = await self._relist()
            self._start_watch(version)

    def _start_watch(self, version: str) -> None:
        if self._watching:
            return
        self._watching = True
        self._spawn(self._watch(version))
        self._spawn(self._check_stuck())

    async def _watch(self, version: str) -> None:
        while True:
            try:
                async for kind, pod in self.api.watch(
                    "Pod", m.REPLICA_SELECTOR, version, self.watch_timeout_seconds
                ):
                    version = pod.get("metadata", {}).get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        await self._apply(kind, pod)
                continue  # the server ended the watch (timeout): resume from `version`
            except WatchExpired as e:
                self.watch_restarts["gone"] += 1
                log.info("pod watch expired (%s); listing again", e)
                with contextlib.suppress(KubeUnavailable, KubeError):
                    version = await self._relist()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # broken stream, API down: resume once it answers
                self.watch_restarts["error"] += 1
                log.warning("pod watch failed: %s; resuming from %s", e, version)
                await asyncio.sleep(WATCH_RETRY_SECONDS)

    async def _relist(self) -> str:
        """List every replica pod; what is gone since the last look was deleted meanwhile.
        Returns the resourceVersion to watch from."""
        items, version = await self.api.list("Pod", m.REPLICA_SELECTOR)
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["name"])
            await self._apply("MODIFIED", pod)
        for name in [n for n in self._views if n not in seen]:
            await self._apply("DELETED", {"metadata": {"name": name}})
        return version

    async def _apply(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            last = self._views.pop(name, None)
            self._waiting_since.pop(name, None)
            if last is not None:
                ended = view_of(pod) if pod.get("status") else None
                final = ended if ended is not None and ended.state is PodState.ENDED else None
                if final is not None:
                    self._announce_exit(final, final.exit_code, final.describe())
                else:
                    gone = dataclasses.replace(last, lost=True)
                    self._announce_exit(gone, None, "pod deleted before its container ended")
            await self._notify()
            return
        view = view_of(pod)
        if view is None:
            return
        self._views[name] = view
        if view.state is PodState.WAITING:
            self._waiting_since.setdefault(name, self.clock())
        else:
            self._waiting_since.pop(name, None)
            self._announce_start(view)
        if view.state is PodState.ENDED:
            self._announce_exit(view, view.exit_code, view.describe())
        await self._notify()

    def _announce_start(self, view: PodView) -> None:
        if view.name in self._started:
            return
        self._started.add(view.name)
        self._events.put_nowait(
            ReplicaEvent(view.job_id, view.replica, ReplicaEventKind.STARTED, attempt=view.attempt)
        )

    def _announce_exit(self, view: PodView, code: int | None, message: str) -> None:
        if view.name in self._exited:
            return
        self._exited.add(view.name)
        self._events.put_nowait(
            ReplicaEvent(
                view.job_id, view.replica, ReplicaEventKind.EXITED,
                exit_code=code, message=message, attempt=view.attempt, lost=view.lost,
                last_error=view.last_error,
            )
        )  # fmt: skip

    async def _check_stuck(self) -> None:
        """A pod that cannot start (unschedulable, image not pullable, bad config) fails after
        the timeout."""
        period = min(5.0, self.pending_timeout / 4)
        while True:
            await asyncio.sleep(period)
            now = self.clock()
            for name, since in list(self._waiting_since.items()):
                view = self._views.get(name)
                if view is None or not view.stuck or now - since < self.pending_timeout:
                    continue
                self._waiting_since.pop(name, None)
                waited = f"(waited {now - since:.0f} s)"
                if view.reason == UNSCHEDULABLE:  # the scheduler's own words
                    message = f"pod unschedulable: {view.message or view.reason} {waited}"
                else:
                    message = f"pod never started: {view.describe()} {waited}"
                self._announce_exit(view, None, message)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _forget(self, job_id: str) -> None:
        # Kept pods (of a failed job) stay known: each announces only what it has not (the end
        # of a replica that was still stopping).
        prefix = f"{job_id}-"
        for names in (self._started, self._exited):
            names.difference_update(
                {n for n in names if n.startswith(prefix) and n not in self._views}
            )
        for replica in self._away_codes.pop(job_id, {}):
            self._away_errors.pop((job_id, replica), None)

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
