"""User-node Python client: submit, watch, wait and cancel wsjobs over gRPC.

    from appliance.client import ApplianceClient

    with ApplianceClient("127.0.0.1:50051") as client:
        job = client.submit(params="params.yaml", num_csx=2, num_steps=50)
        for event in job.watch():
            print(event)
        final = job.wait()

Unless submitted with `detach=True`, a job lives only as long as its client: the client renews
the job's lease from a daemon thread, and the coordinator cancels the job once the client is
closed (or its process dies) and the lease lapses.

Results are the domain types of `appliance.domain` (Job, JobEvent, ...); failures are the
project's errors (`appliance.domain.errors`), plus JobFailed, JobCancelled and JobTimedOut from
`wait()`.
"""

from appliance.client.client import ApplianceClient
from appliance.client.errors import JobCancelled, JobFailed, JobTimedOut
from appliance.client.handle import CancelResult, JobHandle
from appliance.client.hold_calls import HoldResult
from appliance.client.lease import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_LEASE_SECONDS
from appliance.client.nodes import NodeStatus
from appliance.client.params import ParamsSource
from appliance.client.user_config import DEFAULT_ADDRESS
from appliance.client.watch import WatchRetry

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_LEASE_SECONDS",
    "ApplianceClient",
    "CancelResult",
    "HoldResult",
    "JobCancelled",
    "JobFailed",
    "JobHandle",
    "JobTimedOut",
    "NodeStatus",
    "ParamsSource",
    "WatchRetry",
]
