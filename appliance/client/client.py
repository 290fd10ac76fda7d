"""The user-node Python client of the appliance's ClusterService.

Every call goes through one gRPC channel; every failed call is turned into the project's own
exception (NotFound, InvalidSpec, Unavailable, ...) by `error_from_rpc`, so no protobuf or gRPC
type reaches the caller.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.client import tls
from appliance.client.auth import with_token
from appliance.client.client_identity import resolve_identity
from appliance.client.cluster_calls import ClusterCalls, os_user
from appliance.client.handle import CancelResult, JobHandle
from appliance.client.hold_calls import HoldCalls
from appliance.client.lease import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_LEASE_SECONDS,
    LeaseKeeper,
    check_lease_timing,
    lease_holder,
)
from appliance.client.params import ParamsSource, load_params_yaml, prepare_submission
from appliance.client.reservation_calls import ReservationCalls
from appliance.client.tls import resolve_trust
from appliance.client.user_config import DEFAULT_ADDRESS, resolve_token
from appliance.client.watch import DETACHED_OUTAGE_SECONDS, WatchRetry, watch_job_events
from appliance.domain.compile import CompileReport
from appliance.domain.dependencies import Dependency
from appliance.domain.elastic import parse_csx_range
from appliance.domain.errors import ApplianceError, InvalidSpec
from appliance.domain.job import Job, JobEvent
from appliance.domain.reasons import parse_codes
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import Mode, Priority, validate_labels, validate_spec
from appliance.domain.spec_document import spec_fields
from appliance.protocol import convert
from appliance.protocol.errors import error_from_rpc

_MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a full job (GetJob) carries up to 1 MiB of params
_T = TypeVar("_T")


PAGE_SIZE = 1000  # the server caps a ListJobs page at 10,000


class ApplianceClient(ClusterCalls, HoldCalls, ReservationCalls):
    """A connection to the coordinator's gRPC API (`host:port`).

    Example:
        with ApplianceClient("127.0.0.1:50051") as client:
            job = client.submit(params="params.yaml", num_csx=2, num_steps=50)
            final = job.wait()

    `timeout` bounds each request/response call in seconds; streams (watch, logs, list all)
    have no deadline of their own. `watch_retry` controls how a broken watch stream is resumed.

    Jobs submitted through a client are tied to it unless detached: the coordinator cancels
    such a job when the client stops renewing its lease of `lease_seconds` (a daemon thread
    renews it every `heartbeat_interval` seconds until the job ends or `close()` is called).
    `detach=True` makes `submit()` detach by default (see `appliance.client.lease`).
    `token` is sent as a bearer token with every call (needed once the coordinator has tokens;
    `appliance token create` makes one). Without it the client takes csctl's: $CSCTL_TOKEN,
    else `token:` in csctl's config file (appliance.client.user_config); a config file that
    cannot be read raises user_config.ConfigError. `client_cert`/`client_key`: the certificate
    presented to a coordinator serving mutual TLS (else csctl's; client_identity.py).
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout: float | None = 10.0,
        watch_retry: WatchRetry | None = None,
        detach: bool = False,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        token: str | None = None,
        ca: str | os.PathLike[str] | bytes | None = None,
        insecure: bool | None = None,
        client_cert: str | os.PathLike[str] | None = None,
        client_key: str | os.PathLike[str] | None = None,
    ) -> None:
        check_lease_timing(lease_seconds, heartbeat_interval)
        # Before anything starts: an unusable CA or plaintext off the machine is a ConfigError.
        given = ca if isinstance(ca, bytes) or ca is None else Path(ca)
        self.trust = resolve_trust(given, insecure, os.environ)
        self.identity = None
        if not self.trust.insecure:
            cert, key = (None if p is None else Path(p) for p in (client_cert, client_key))
            self.identity = resolve_identity(cert, key, os.environ)
        if token is None:  # like csctl: $CSCTL_TOKEN, then `token:` in its config file
            found = resolve_token(None, os.environ)
            token = found.value if found is not None else None
        self.address = address
        self.timeout = timeout
        self.watch_retry = watch_retry or WatchRetry()
        self.detach = detach or lease_seconds == 0
        self.lease_seconds = lease_seconds
        self.heartbeat_interval = heartbeat_interval
        self._leases = LeaseKeeper(self._heartbeat, heartbeat_interval)
        self._channel = tls.channel(
            address,
            self.trust,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ],
            identity=self.identity,
        )
        claimed = with_token(self._channel, token, user=_claimed_user())
        self._stub = cluster_pb2_grpc.ClusterServiceStub(claimed)

    def close(self) -> None:
        """Stop renewing leases and close the channel; the client cannot be used afterwards.

        Jobs this client holds (submitted without `detach`) are cancelled by the coordinator
        once their lease lapses.
        """
        self._leases.stop(timeout=self.heartbeat_interval + (self.timeout or 10.0))
        self._channel.close()

    @property
    def held_jobs(self) -> frozenset[str]:
        """Ids of the jobs whose leases this client is renewing."""
        return self._leases.held

    def __enter__(self) -> ApplianceClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ApplianceClient({self.address!r})"

    def submit(
        self,
        params: ParamsSource,
        *,
        num_csx: int | str,
        num_steps: int | None = None,
        mode: str | Mode = Mode.TRAIN,
        labels: Mapping[str, str] | None = None,
        priority: str | Priority = Priority.P2,
        model_dir: str | os.PathLike[str] = "",
        user: str | None = None,
        detach: bool | None = None,
        max_restarts: int | None = None,
        preemptible: bool = True,
        queue: str | None = None,
        depends_on: str | Iterable[str | Dependency] | None = None,
        **more_spec: Any,
    ) -> JobHandle:
        """Submit a wsjob and return a handle to it.

        `num_csx`: how many CS-2 systems, or a range (`"2-8"`: elastic, domain/elastic.py, the
        same as `num_csx=8, num_csx_min=2`).

        `params` is the path of a params YAML file (read here, on the user node) or the params as a
        mapping. `num_steps` and `model_dir` default to the params' runconfig.max_steps and
        runconfig.model_dir; a relative `model_dir` is made absolute here. The handle's `warnings`
        name the params keys accepted but not used (the job's events record them). `user` defaults
        to the OS user. Unless `detach` (default: the client's `detach`), the job holds a lease
        this client renews; it is cancelled when the client goes away. `max_restarts`: how often
        the job is restarted from its newest checkpoint after a retryable failure (None: the
        cluster's default). `preemptible=False` (admins only): never preempted by a job of higher
        priority. `queue`: the queue to submit to (None: `default`). `depends_on`: jobs it waits
        for ("wsjob-…" or "afterany:wsjob-…", see domain/dependencies.py). `more_spec`: the spec's
        other fields by name (JobSpec's, e.g. `comment="sweep 7"`; `hold=True` submits it held).
        Raises InvalidSpec naming the bad field before anything is sent, or the server's error.
        """
        unknown = sorted(set(more_spec) - {f.name for f in spec_fields()})
        if unknown:
            raise TypeError(f"submit() got an unexpected keyword argument {unknown[0]!r}")
        # An array's tasks run detached: no one lease for them all (`csctl get array` follows).
        detached = self.detach if detach is None else detach
        detached = detached or bool(more_spec.get("array") or more_spec.get("sweep"))
        settled = prepare_submission(params, num_steps, model_dir)
        most, fewest = parse_csx_range(num_csx)
        if fewest:
            more_spec = {**more_spec, "num_csx_min": fewest}
        spec = validate_spec(
            params_yaml=settled.params_yaml,
            num_csx=most,
            num_steps=settled.num_steps,
            mode=mode,
            labels=labels,
            priority=priority if isinstance(priority, Priority) else Priority.parse(priority),
            model_dir=settled.model_dir,
            max_restarts=max_restarts,
            preemptible=preemptible,
            queue=queue,
            depends_on=[depends_on] if isinstance(depends_on, str) else depends_on,
            **more_spec,
        )
        request = cluster_pb2.SubmitJobRequest(
            spec=convert.spec_to_pb(spec), user=user or os_user()
        )
        if not detached:
            request.lease_seconds = self.lease_seconds
            request.lease_holder = lease_holder()
        job = convert.job_from_pb(self._call(self._stub.SubmitJob, request))
        if not detached:
            self._leases.hold(job.id)
        array_id = job.array.array_id if job.array is not None else ""
        return JobHandle(self, job.id, warnings=settled.warnings, array_id=array_id)

    def compile(self, params: ParamsSource, *, num_csx: int, num_steps: int = 1) -> CompileReport:
        """Compile (validate-only) mode: check the params against the model code and the pool
        and return what the job would stream and need; nothing is submitted or reserved."""
        spec = validate_spec(
            params_yaml=load_params_yaml(params), num_csx=num_csx, num_steps=num_steps,
            mode=Mode.COMPILE,
        )  # fmt: skip
        request = cluster_pb2.CompileJobRequest(spec=convert.spec_to_pb(spec))
        return convert.compile_report_from_pb(self._call(self._stub.CompileJob, request))

    def job(self, job_id: str) -> JobHandle:
        """A handle on an existing job (no call is made until it is used)."""
        return JobHandle(self, job_id)

    def get_job(self, job_id: str) -> Job:
        """The job's current status, replicas included. Raises NotFound."""
        request = cluster_pb2.GetJobRequest(job_id=job_id)
        return convert.job_from_pb(self._call(self._stub.GetJob, request))

    def list_jobs(
        self,
        *,
        all: bool = False,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int | None = None,
        mine: bool = False,
        selector: str = "",
        reasons: Iterable[str] = (),
        array: str = "",
    ) -> list[Job]:
        """Jobs newest first: active ones, or every one with `all`; at most `limit` of them.

        `user` keeps one user's jobs; every label in `labels` must match, and `selector`, a
        label selector as kubectl writes it (`team in (nlp,cv),!tmp`). `mine` keeps the
        caller's: its token's user when the appliance has authentication on, else this
        process's user name (the one `submit` sends). `reasons`: only jobs whose reason or
        pending reason has one of these codes (domain/reasons.py ReasonCode; any case), ended
        ones too. `array`: only the tasks of this array.
        """
        if limit is not None and limit <= 0:
            raise InvalidSpec(f"limit must be a positive number, got {limit}", field="limit")
        request = self._list_request(all=all, user=user, labels=labels, mine=mine,
                                     selector=selector, reasons=reasons, array=array)  # fmt: skip
        if limit is None:
            pages: Iterator[cluster_pb2.ListJobsResponse] = self._stream(
                self._stub.StreamJobs, request
            )
            return [convert.job_from_pb(job) for page in pages for job in page.jobs]
        jobs: list[Job] = []
        while len(jobs) < limit:
            request.limit = min(limit - len(jobs), PAGE_SIZE)
            page = self._call(self._stub.ListJobs, request)
            jobs.extend(convert.job_from_pb(job) for job in page.jobs)
            if not page.next_page_token or not page.jobs:
                break
            request.page_token = page.next_page_token
        return jobs[:limit]

    def watch_jobs(
        self,
        *,
        all: bool = False,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        mine: bool = False,
        selector: str = "",
        reasons: Iterable[str] = (),
        array: str = "",
    ) -> Iterator[list[Job] | None]:
        """The jobs `list_jobs` would list, then each such job again whenever it changes (a
        phase, a priority, labels; a new job), like `kubectl get -w`: batches of the listed
        jobs, then None once the listing is complete, then batches of changed jobs. Without
        `all`, a job that ends comes once more, in its final phase. Runs until the caller
        stops iterating or the connection breaks (Unavailable)."""
        request = self._list_request(all=all, user=user, labels=labels, mine=mine,
                                     selector=selector, reasons=reasons, array=array)  # fmt: skip
        for response in self._stream(self._stub.WatchJobs, request):
            if response.jobs:
                yield [convert.job_from_pb(job) for job in response.jobs]
            if response.listed:
                yield None

    def _list_request(
        self,
        *,
        all: bool,
        user: str | None,
        labels: Mapping[str, str] | None,
        mine: bool,
        selector: str,
        reasons: Iterable[str] = (),
        array: str = "",
    ) -> cluster_pb2.ListJobsRequest:
        return cluster_pb2.ListJobsRequest(
            all=all,
            user=os_user() if mine else user or "",
            labels=validate_labels(labels or {}),
            mine=mine,
            label_selector=str(parse_selector(selector, field="selector")),
            reasons=[code.value for code in sorted(parse_codes(reasons))],
            array=array,
        )

    def cancel_job(self, job_id: str, *, reason: str = "") -> CancelResult:
        """Cancel a job; cancelling a finished job changes nothing and says so."""
        request = cluster_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        response = self._call(self._stub.CancelJob, request)
        return CancelResult(
            job=convert.job_from_pb(response.job),
            changed=response.changed,
            message=response.message,
        )

    def events(self, job_id: str) -> list[JobEvent]:
        """The recorded phase events of a job, oldest first."""
        request = cluster_pb2.GetJobEventsRequest(job_id=job_id)
        response = self._call(self._stub.GetJobEvents, request)
        return [convert.event_from_pb(event) for event in response.events]

    def watch(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> Iterator[JobEvent]:
        """Recorded then live events of a job, ending after its terminal phase event.

        Raises TimeoutError if `timeout` seconds pass first. A stream broken by a lost
        connection is resumed where it stopped (see WatchRetry), for as long as the outage can
        last without losing the job: for a job this client holds, until its lease would lapse
        (`lease_seconds` less one heartbeat interval); `notify` hears about it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        give_up_after = self.watch_retry.give_up_after
        if give_up_after is None:
            held = job_id in self.held_jobs
            give_up_after = (
                self.lease_seconds - self.heartbeat_interval if held else DETACHED_OUTAGE_SECONDS
            )
        return watch_job_events(
            self._stub,
            job_id,
            address=self.address,
            retry=self.watch_retry,
            give_up_after=give_up_after,
            deadline=deadline,
            notify=notify,
        )

    def set_priority(self, job_id: str, priority: str | Priority) -> Job:
        """Change a queued or running job's priority (`"p1"` or Priority.P1); returns the job.

        The queue re-orders at once. Raises Conflict for a finished job.
        """
        parsed = priority if isinstance(priority, Priority) else Priority.parse(priority)
        request = cluster_pb2.SetJobPriorityRequest(
            job_id=job_id, priority=convert.priority_to_pb(parsed)
        )
        return convert.job_from_pb(self._call(self._stub.SetJobPriority, request))

    def update_labels(
        self,
        job_id: str,
        set: Mapping[str, str] | None = None,
        remove: Iterable[str] = (),
    ) -> Job:
        """Add or change the labels in `set` and remove the keys in `remove`; returns the job."""
        request = cluster_pb2.UpdateJobLabelsRequest(
            job_id=job_id, set=validate_labels(dict(set or {})), remove=list(remove)
        )
        return convert.job_from_pb(self._call(self._stub.UpdateJobLabels, request))

    def logs(
        self, job_id: str, replica: str | None = None, *, follow: bool = False
    ) -> Iterator[tuple[str, str]]:
        """(replica, line) pairs of one replica's log, or of every replica's in turn.

        With `follow`, new lines keep coming (like `tail -f`) until the job is terminal.
        Raises NotFound for an unknown job or replica (naming the job's replicas).
        """
        request = cluster_pb2.GetJobLogsRequest(
            job_id=job_id, replica=replica or "", follow=follow
        )
        for chunk in self._stream(self._stub.GetJobLogs, request):
            for line in chunk.lines:
                yield chunk.replica, line

    def version(self) -> str:
        """The coordinator's version string."""
        return str(self._call(self._stub.GetVersion, cluster_pb2.GetVersionRequest()).version)

    def _heartbeat(self, job_id: str) -> bool:
        request = cluster_pb2.HeartbeatLeaseRequest(job_id=job_id, holder=lease_holder())
        timeout = min(self.timeout or self.heartbeat_interval, self.heartbeat_interval)
        try:
            response = self._stub.HeartbeatLease(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        return bool(response.keep_running)

    def _call(self, method: Callable[..., _T], request: object) -> _T:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise self._error(exc) from exc

    def _stream(self, method: Callable[..., Iterator[_T]], request: object) -> Iterator[_T]:
        try:
            yield from method(request)
        except grpc.RpcError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: grpc.RpcError) -> ApplianceError:
        identity = "" if self.identity is None else self.identity.source
        return error_from_rpc(
            exc, address=self.address, trust=self.trust.describe(), identity=identity
        )


def _claimed_user() -> str:
    """This process's user name, sent with every call: while the appliance has authentication
    off, its per-user limits count the calls as this user's."""
    try:
        return os_user()
    except InvalidSpec:
        return ""
