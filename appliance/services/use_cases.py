"""The use cases the doors call, each built once by the composition root (appliance/composition)
and handed to the gRPC, REST and web doors, which never hold the Context."""

from __future__ import annotations

import dataclasses

from appliance.services.arrays import ArrayService
from appliance.services.audit import AuditTrail
from appliance.services.bulk_cancels import BulkCancel
from appliance.services.health import Readiness
from appliance.services.holds import HoldService
from appliance.services.job_watch import JobWatch
from appliance.services.jobs import JobService
from appliance.services.limits import Limits
from appliance.services.logs import LogService
from appliance.services.metrics_scrape import MetricsScrape
from appliance.services.nodes import NodeService
from appliance.services.queues import QueueService
from appliance.services.replicas import ReplicaService
from appliance.services.reservations import ReservationService
from appliance.services.usage import UsageService


@dataclasses.dataclass(frozen=True)
class UseCases:
    jobs: JobService
    replicas: ReplicaService
    nodes: NodeService
    usage: UsageService
    queues: QueueService
    bulk_cancels: BulkCancel
    job_watch: JobWatch
    logs: LogService
    metrics: MetricsScrape
    readiness: Readiness
    audit: AuditTrail
    limits: Limits
    arrays: ArrayService
    holds: HoldService
    reservations: ReservationService
