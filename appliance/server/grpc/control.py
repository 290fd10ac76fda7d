"""ReplicaControl: what a job's replicas call on the coordinator."""

from __future__ import annotations

from appliance._proto.v1 import control_pb2, control_pb2_grpc
from appliance.protocol import convert
from appliance.server.grpc.errors import Ctx, unary
from appliance.services.replicas import Directive, ReplicaService

MAX_AWAIT_SECONDS = 600.0


class ReplicaControlServicer(control_pb2_grpc.ReplicaControlServicer):
    """With authentication on, every call carries the replica token of the job it names
    (checked before the method runs: authn.py)."""

    def __init__(self, replicas: ReplicaService) -> None:
        self.replicas = replicas

    @unary
    async def RegisterReplica(
        self, request: control_pb2.RegisterReplicaRequest, context: Ctx
    ) -> control_pb2.RegisterReplicaResponse:
        await self.replicas.register(
            request.job_id, request.attempt, request.replica, request.address, request.pid
        )
        return control_pb2.RegisterReplicaResponse()

    @unary
    async def AwaitPeers(
        self, request: control_pb2.AwaitPeersRequest, context: Ctx
    ) -> control_pb2.Topology:
        wait = min(request.timeout_seconds or MAX_AWAIT_SECONDS, MAX_AWAIT_SECONDS)
        job = await self.replicas.await_running(request.job_id, request.attempt, wait)
        return control_pb2.Topology(
            job_id=job.id,
            params_yaml=job.spec.params_yaml,
            num_csx=job.systems_running,
            num_steps=job.spec.num_steps,
            mode=convert.mode_to_pb(job.spec.mode),
            model_dir=job.spec.model_dir,
            attempt=job.attempt,
            peers=[
                control_pb2.Peer(
                    name=r.name, role=r.role.value, index=r.index, address=r.address, node=r.node
                )
                for r in job.replicas
            ],
        )

    @unary
    async def ReportProgress(
        self, request: control_pb2.ReportProgressRequest, context: Ctx
    ) -> control_pb2.ReplicaDirective:
        directive = await self.replicas.report_progress(
            request.job_id,
            request.attempt,
            convert.progress_from_pb(request.progress),
            checkpointed=request.checkpointed,
        )
        return _directive_to_pb(directive)

    @unary
    async def Heartbeat(
        self, request: control_pb2.HeartbeatRequest, context: Ctx
    ) -> control_pb2.ReplicaDirective:
        directive = await self.replicas.heartbeat(
            request.job_id, request.attempt, request.replica, request.data_plane
        )
        return _directive_to_pb(directive)


def _directive_to_pb(directive: Directive) -> control_pb2.ReplicaDirective:
    return control_pb2.ReplicaDirective(
        keep_running=directive.keep_running,
        phase=convert.phase_to_pb(directive.phase),
        checkpoint_now=directive.checkpoint_now,
    )
