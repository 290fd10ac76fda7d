"""A job's event stream that survives a broken connection and a coordinator restart.

WatchJob replays the recorded phase events of a job, then sends live phase changes and progress
until the job is terminal. If the stream breaks with UNAVAILABLE (a coordinator restart, a
dropped connection) after the server was reached once, the stream is reopened, with backoff, for
as long as the outage may last: for a job this client holds, while its lease surely still runs
(the coordinator cancels it only once the lease lapses), so an attached launcher rides out a
restart. Each reopened stream starts after the last phase event seen, so no recorded event is
delivered twice and none is lost; progress events are not recorded, and the ones sent while
disconnected are skipped. `notify` hears when the coordinator goes away and comes back.

Written here rather than with tenacity or gRPC's retry policy: gRPC does not retry a stream
once a message has arrived, and what is retried is not one call but a stream resumed from a
cursor, with an outage window that restarts at every event, a deadline and notices; a
retrying decorator would need all of that as callbacks around the same loop.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.errors import ApplianceError, Unavailable
from appliance.domain.job import EventKind, JobEvent
from appliance.domain.phases import Phase
from appliance.protocol.convert import event_from_pb
from appliance.protocol.errors import error_from_rpc

log = logging.getLogger(__name__)
# How long a watch of a job no lease ties to this client rides out an unreachable coordinator.
DETACHED_OUTAGE_SECONDS = 120.0


@dataclasses.dataclass(frozen=True)
class WatchRetry:
    """How a broken watch stream is reopened: with backoff, until the coordinator has been
    unreachable for `give_up_after` seconds (None: the client decides, from the job's lease)."""

    give_up_after: float | None = None
    initial_backoff: float = 0.2
    max_backoff: float = 3.0

    def backoff(self, failure: int) -> float:
        """Seconds to wait before reopening after the n-th consecutive failure (1-based)."""
        return float(min(self.max_backoff, self.initial_backoff * 2 ** (failure - 1)))


@dataclasses.dataclass
class _WatchState:
    after_seq: int = 0
    reached_server: bool = False
    failures: int = 0
    outage_since: float | None = None  # monotonic time of the first failure in a row
    last_phase: Phase | None = None


def watch_job_events(
    stub: cluster_pb2_grpc.ClusterServiceStub,
    job_id: str,
    *,
    address: str,
    retry: WatchRetry,
    give_up_after: float,
    deadline: float | None = None,
    notify: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[JobEvent]:
    """Yield the job's events until a terminal phase event; `deadline` is a monotonic time.
    A coordinator unreachable for longer than `give_up_after` seconds ends the watch.

    Raises TimeoutError when the deadline passes first and the project's errors otherwise.
    """
    state = _WatchState()
    notify = notify or log.warning
    while True:
        request = cluster_pb2.WatchJobRequest(job_id=job_id, after_seq=state.after_seq)
        call = stub.WatchJob(request, timeout=_remaining(deadline))
        try:
            for message in call:
                event = event_from_pb(message)
                if state.outage_since is not None:
                    notify(f"the coordinator at {address} is back; following {job_id} again")
                _record(state, event)
                yield event
                if event.kind is EventKind.PHASE and event.to_phase and event.to_phase.terminal:
                    return
            broken: ApplianceError = Unavailable(
                f"the event stream of job {job_id} ended before the job finished"
            )
        except grpc.RpcError as exc:
            timed_out = _past(deadline) or _code(exc) is grpc.StatusCode.DEADLINE_EXCEEDED
            if deadline is not None and timed_out:
                raise _timeout(job_id, state) from None
            if _code(exc) is not grpc.StatusCode.UNAVAILABLE or not state.reached_server:
                raise error_from_rpc(exc, address=address) from exc
            broken = error_from_rpc(exc, address=address)
        finally:
            call.cancel()
        state.failures += 1
        now = clock()
        if state.outage_since is None:
            state.outage_since = now
            notify(
                f"the coordinator at {address} is unreachable ({broken.message}); retrying "
                f"for up to {give_up_after:.0f} s"
            )
        if now - state.outage_since >= give_up_after:
            raise Unavailable(
                f"the coordinator at {address} has been unreachable for "
                f"{now - state.outage_since:.0f} s ({broken.message})"
            )
        pause = min(retry.backoff(state.failures), give_up_after - (now - state.outage_since))
        remaining = _remaining(deadline)
        if remaining is not None and remaining <= pause:
            raise _timeout(job_id, state)
        sleep(pause)


def _record(state: _WatchState, event: JobEvent) -> None:
    state.reached_server = True
    state.failures = 0
    state.outage_since = None
    state.after_seq = max(state.after_seq, event.seq)
    if event.to_phase is not None:
        state.last_phase = event.to_phase


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.Call) else None


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _timeout(job_id: str, state: _WatchState) -> TimeoutError:
    phase = f" (still {state.last_phase})" if state.last_phase else ""
    return TimeoutError(f"timed out waiting for job {job_id} to finish{phase}")
