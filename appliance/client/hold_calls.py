"""The client's calls that hold, release, suspend and resume a job (#37). A part of
ApplianceClient (appliance/client/client.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.job import Job
from appliance.protocol import convert

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class HoldResult:
    """What a hold, release, suspend or resume did: `changed` is False when nothing did (held
    already, not held), and `message` says what happened."""

    job: Job
    changed: bool
    message: str = ""


class HoldCalls:
    """Holds of one job at a time; ApplianceClient provides `_stub` and `_call`."""

    _stub: cluster_pb2_grpc.ClusterServiceStub

    def _call(self, method: Callable[..., _T], request: object) -> _T:
        raise NotImplementedError

    def hold_job(self, job_id: str) -> HoldResult:
        """Hold a queued job: it keeps its place in its queue and waits until released (Slurm's
        `scontrol hold`). A job that is not queued is a Conflict naming its phase."""
        return self._hold(self._stub.HoldJob, job_id)

    def release_job(self, job_id: str) -> HoldResult:
        """Release a held job: it takes its place again. Only an admin releases an admin's
        hold (PermissionDenied)."""
        return self._hold(self._stub.ReleaseJob, job_id)

    def suspend_job(self, job_id: str) -> HoldResult:
        """Suspend a running job: it checkpoints, gives its systems back and waits, held,
        until resumed."""
        return self._hold(self._stub.SuspendJob, job_id)

    def resume_job(self, job_id: str) -> HoldResult:
        """Resume a suspended job: it goes on from the checkpoint it wrote when suspended."""
        return self._hold(self._stub.ResumeJob, job_id)

    def _hold(
        self,
        method: Callable[[cluster_pb2.JobHoldRequest], cluster_pb2.JobHoldResponse],
        job_id: str,
    ) -> HoldResult:
        response = self._call(method, cluster_pb2.JobHoldRequest(job_id=job_id))
        return HoldResult(convert.job_from_pb(response.job), response.changed, response.message)
