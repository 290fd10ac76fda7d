"""ReplicaControl: what a job's replicas call on the coordinator."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from appliance._proto.v1 import control_pb2, control_pb2_grpc
from appliance.domain.auth import AUTH_METADATA_KEY
from appliance.protocol import convert
from appliance.server.auth import bearer_token
from appliance.server.grpc.errors import unary
from appliance.server.replica_tokens import ReplicaTokens
from appliance.services.replicas import ReplicaService

Ctx: TypeAlias = grpc.aio.ServicerContext[Any, Any]
MAX_AWAIT_SECONDS = 600.0


class ReplicaControlServicer(control_pb2_grpc.ReplicaControlServicer):
    """With `tokens` (authentication on), every call must carry its job's replica token."""

    def __init__(self, replicas: ReplicaService, tokens: ReplicaTokens | None = None) -> None:
        self.replicas = replicas
        self.tokens = tokens

    async def _check(self, job_id: str, context: Ctx) -> None:
        if self.tokens is None:
            return
        metadata = dict(context.invocation_metadata() or ())
        token = bearer_token(metadata.get(AUTH_METADATA_KEY))
        if token is None or not self.tokens.valid(job_id, token):
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"replica calls for {job_id or 'a job'} need that job's replica token",
            )

    @unary
    async def RegisterReplica(
        self, request: control_pb2.RegisterReplicaRequest, context: Ctx
    ) -> control_pb2.RegisterReplicaResponse:
        await self._check(request.job_id, context)
        await self.replicas.register(request.job_id, request.replica, request.address, request.pid)
        return control_pb2.RegisterReplicaResponse()

    @unary
    async def AwaitPeers(
        self, request: control_pb2.AwaitPeersRequest, context: Ctx
    ) -> control_pb2.Topology:
        await self._check(request.job_id, context)
        wait = min(request.timeout_seconds or MAX_AWAIT_SECONDS, MAX_AWAIT_SECONDS)
        job = await self.replicas.await_running(request.job_id, wait)
        return control_pb2.Topology(
            job_id=job.id,
            params_yaml=job.spec.params_yaml,
            num_csx=job.spec.num_csx,
            num_steps=job.spec.num_steps,
            mode=convert.mode_to_pb(job.spec.mode),
            model_dir=job.spec.model_dir,
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
        await self._check(request.job_id, context)
        keep = await self.replicas.report_progress(
            request.job_id, convert.progress_from_pb(request.progress)
        )
        return control_pb2.ReplicaDirective(keep_running=keep)

    @unary
    async def Heartbeat(
        self, request: control_pb2.HeartbeatRequest, context: Ctx
    ) -> control_pb2.ReplicaDirective:
        await self._check(request.job_id, context)
        keep, phase = await self.replicas.keep_running(request.job_id)
        directive = control_pb2.ReplicaDirective(keep_running=keep)
        if phase is not None:
            directive.phase = convert.phase_to_pb(phase)
        return directive
