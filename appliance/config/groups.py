"""The settings in groups, each frozen: what one component takes (never the whole Settings).

Settings (settings.py) reads the flat APPLIANCE_* environment once and validates it; each
group here is one part of it (`settings.scheduler`, `settings.kube`, ...), built by Settings
as it is asked for. A group's defaults are the settings' defaults (settings.py takes them from
here), so a test or a tool may build a group alone: `SchedulerSettings(interval=0.1)`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from appliance.config.kube import ReplicaResources
from appliance.domain.audit import AuditLevel
from appliance.domain.leadership import LeaseTiming
from appliance.domain.simulation import FailAt
from appliance.domain.wafer import WAFER_BYTES

PreemptionPolicy = Literal["lower-priority", "never"]
Election = Literal["auto", "off", "database", "kubernetes"]


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Where the doors listen, and how replicas reach this coordinator."""

    host: str = "127.0.0.1"
    grpc_port: int = 50051
    http_port: int = 8080
    http_max_body_bytes: int = 4 << 20
    coordinator_address: str = ""
    coordinator_id: str = ""


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    """Where the jobs are kept."""

    data_dir: Path = Path(".appliance")
    database_url: str = ""

    @property
    def url(self) -> str:
        """The SQLAlchemy URL: the database's, or SQLite in the data dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'appliance.db').resolve()}"

    @property
    def is_postgres(self) -> bool:
        return self.url.startswith("postgresql")


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """The pool (counts, or an inventory file naming the nodes) and the team queues."""

    systems: int = 4
    memoryx_nodes: int = 4
    swarmx_nodes: int = 2
    memoryx_bytes: int = 16 << 30
    swarmx_ports: int = 4
    inventory_file: Path | None = None
    queues_file: Path | None = None
    worker_nodes: int = 2
    worker_slots: int = 8
    wafer_bytes: int = WAFER_BYTES  # each system's on-chip memory (the inventory may say its own)


@dataclasses.dataclass(frozen=True)
class SchedulerSettings:
    """The scheduler's passes, and the fair share between queues."""

    interval: float = 2.0
    max_admissions: int = 256
    trace: Path | None = None
    fair_share_half_life_seconds: float = 7 * 86_400.0


@dataclasses.dataclass(frozen=True)
class PreemptionSettings:
    policy: PreemptionPolicy = "lower-priority"
    grace_seconds: float = 30.0
    min_run_seconds: float = 60.0


@dataclasses.dataclass(frozen=True)
class TimeLimitSettings:
    """What happens at a job's time limit: its chief is asked for a checkpoint, and has
    `grace_seconds` to write it before the job ends TIMEOUT anyway."""

    grace_seconds: float = 60.0


@dataclasses.dataclass(frozen=True)
class RestartSettings:
    """When a failed attempt is run again, and how a peer's failure is told apart."""

    max_restarts: int = 0
    exit_codes: tuple[int, ...] = ()
    backoff_seconds: float = 1.0
    peer_failure_settle_seconds: float = 5.0


DataPlane = Literal["shared-memory", "grpc"]


@dataclasses.dataclass(frozen=True)
class ReplicaSettings:
    """The replicas' lifetimes, whatever runs them."""

    cancel_grace_seconds: float = 5.0
    init_timeout_seconds: float = 120.0
    orphan_timeout: float = 60.0
    log_tail_lines: int = 20
    # How co-located replicas of a job move tensors: "shared-memory" (else gRPC, per peer) or
    # "grpc" for every peer (appliance/workers/transport/channels.py).
    data_plane: DataPlane = "shared-memory"


@dataclasses.dataclass(frozen=True)
class SimSettings:
    """The simulated backend."""

    step_seconds: float = 0.01
    failure_rate: float = 0.0
    failures: tuple[FailAt, ...] = ()
    seed: int | None = None


@dataclasses.dataclass(frozen=True)
class LeaseSettings:
    """Leader election among coordinators sharing a store."""

    election: Election = "auto"
    name: str = "appliance-leader"
    timing: LeaseTiming = dataclasses.field(default_factory=LeaseTiming)


@dataclasses.dataclass(frozen=True)
class KubeSettings:
    """The Kubernetes API, and the replica pods made through it."""

    namespace: str = ""
    config: Path | None = None
    image: str = "appliance:dev"
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    clean_pod_policy: Literal["all", "keep-failed"] = "all"
    pending_timeout_seconds: float = 300.0
    request_timeout_seconds: float = 10.0
    model_dirs_claim: str = ""
    replica_memory_limit: str = "4Gi"
    replica_resources: ReplicaResources = dataclasses.field(default_factory=ReplicaResources)
    watch_timeout_seconds: int = 300
    data_sets: str = ""
    data_sets_claim: str = ""


@dataclasses.dataclass(frozen=True)
class ModelDirSettings:
    """Where model dirs live (users/<user>/, groups/<group>/) and what else may hold them."""

    root: Path = Path(".appliance") / "model_dirs"
    allowed: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class DataDirSettings:
    """Where shared data sets live that every user's job may read (beside each user's own,
    under the model dirs root)."""

    allowed: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class OidcSettings:
    """JWTs of an OIDC issuer accepted as bearer tokens (server/oidc.py): whose, for whom,
    checked with which keys, and which claims name the user and the groups."""

    issuer: str
    audience: str
    jwks_file: Path | None
    user_claim: str = "sub"
    groups_claim: str = "groups"
    admin_group: str = ""
    jwks_url: str = ""  # instead of the file: fetched (server/jwks.py)
    jwks_ca_file: Path | None = None  # whom to trust for the URL (None: the system's CAs)


@dataclasses.dataclass(frozen=True)
class AuthSettings:
    """Who may call (the tokens file; None: authentication off, unless OIDC is set), and the
    replicas' key."""

    tokens_file: Path | None = None
    replica_key_file: Path = Path(".appliance") / "replica-token.key"
    oidc: OidcSettings | None = None


@dataclasses.dataclass(frozen=True)
class AuditSettings:
    """The audit log (domain/audit.py): what each record holds (the level), an optional
    JSON-lines copy (a path, or "-" for stdout; None: none), and how many days rows are kept
    (0: for ever)."""

    level: AuditLevel = AuditLevel.METADATA
    file: str | None = None
    retention_days: float = 90.0


@dataclasses.dataclass(frozen=True)
class LimitSettings:
    """Per-user limits (domain/limits.py): on or off, and the file of an admin's defaults and
    overrides (None: the built-in defaults), followed on change."""

    enabled: bool = True
    file: Path | None = None
