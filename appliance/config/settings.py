"""The one settings object, read once at start-up (APPLIANCE_ environment prefix), flat as the
environment names it and grouped as the components take it (groups.py): `settings.scheduler`,
`settings.kube`, ... each a frozen part, built from the fields once asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from appliance.config.data_fields import DataFields, check_apart
from appliance.config.groups import (
    AuditSettings,
    AuthSettings,
    DataDirSettings,
    DataPlane,
    Election,
    KubeSettings,
    LeaseSettings,
    LimitSettings,
    ModelDirSettings,
    PoolSettings,
    PreemptionPolicy,
    PreemptionSettings,
    ReplicaSettings,
    RestartSettings,
    SchedulerSettings,
    ServerSettings,
    SimSettings,
    StoreSettings,
    TimeLimitSettings,
)
from appliance.config.inventory import pool_of
from appliance.config.kube_fields import KubeFields
from appliance.config.oidc_fields import OidcFields
from appliance.config.tls_fields import TlsFields, TlsSettings
from appliance.domain.audit import AuditLevel
from appliance.domain.inventory import Node
from appliance.domain.leadership import LeaseTiming
from appliance.domain.simulation import parse_fail_at
from appliance.domain.spec import MAX_SIM_STEP_SECONDS, SIM_STEP_SECONDS_LABEL
from appliance.domain.wafer import MAX_WAFER_BYTES

DEFAULT_GRPC_PORT = ServerSettings.grpc_port
DEFAULT_HTTP_PORT = ServerSettings.http_port
BackendName = Literal["local", "kubernetes", "sim"]


class Settings(KubeFields, DataFields, TlsFields, OidcFields):
    """Coordinator settings. Every field can be set as APPLIANCE_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="APPLIANCE_", frozen=True)

    data_dir: Path = Field(
        default=StoreSettings.data_dir,
        description="Where the SQLite store, replica logs and default model dirs live.",
    )
    database_url: str = Field(
        default=StoreSettings.database_url,
        description="Any SQLAlchemy URL (postgresql://...); empty means SQLite in data_dir.",
    )
    host: str = Field(default=ServerSettings.host, description="Address the servers listen on.")
    grpc_port: int = Field(default=DEFAULT_GRPC_PORT, ge=0, le=65535, description="0 = free port")
    http_port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535, description="0 = free port")
    systems: int = Field(
        default=PoolSettings.systems, ge=1, le=4096, description="Number of CS-2 systems."
    )
    memoryx_nodes: int = Field(
        default=PoolSettings.memoryx_nodes, ge=1, le=4096, description="Number of MemoryX nodes."
    )
    swarmx_nodes: int = Field(
        default=PoolSettings.swarmx_nodes, ge=1, le=4096, description="Number of SwarmX nodes."
    )
    memoryx_bytes: int = Field(
        default=PoolSettings.memoryx_bytes, gt=0, description="Memory per MemoryX node."
    )
    swarmx_ports: int = Field(
        default=PoolSettings.swarmx_ports,
        ge=1,
        description="CS-2 ports per SwarmX node (fan-out).",
    )
    worker_nodes: int = Field(
        default=PoolSettings.worker_nodes,
        ge=0,
        le=4096,
        description="Number of input-worker nodes (where jobs that read a data set run their "
        "input workers).",
    )
    worker_slots: int = Field(
        default=PoolSettings.worker_slots,
        ge=1,
        le=4096,
        description="Input workers one worker node hosts.",
    )
    wafer_bytes: int = Field(
        default=PoolSettings.wafer_bytes,
        gt=0,
        le=MAX_WAFER_BYTES,
        description="On-chip memory of each CS-2's wafer, in bytes (40 GB, a CS-2's SRAM); the "
        "inventory file may give a system its own.",
    )
    scheduler_interval: float = Field(
        default=SchedulerSettings.interval,
        gt=0,
        description="Seconds between scheduler passes when nothing wakes it.",
    )
    scheduler_max_admissions: int = Field(
        default=SchedulerSettings.max_admissions,
        ge=1,
        le=100_000,
        description="Jobs one scheduler pass admits at most; the next pass follows at once and "
        "goes on from there (so that no pass holds the coordinator long, like Slurm's "
        "default_queue_depth).",
    )
    scheduler_trace: Path | None = Field(
        default=SchedulerSettings.trace,
        description="A file to append one JSON line per scheduler pass to (when it started, "
        "its seconds, the jobs it admitted and the jobs queued): for benchmarks and tuning.",
    )
    cancel_grace_seconds: float = Field(
        default=ReplicaSettings.cancel_grace_seconds,
        ge=0,
        description="SIGTERM to SIGKILL grace when replicas are stopped.",
    )
    init_timeout_seconds: float = Field(
        default=ReplicaSettings.init_timeout_seconds,
        gt=0,
        description="A job not RUNNING this long after SCHEDULED fails (on Kubernetes, this "
        "long after kube_pending_timeout_seconds, which its pods may take to start).",
    )
    worker_orphan_timeout: float = Field(
        default=ReplicaSettings.orphan_timeout,
        gt=0,
        description="Replicas exit when the coordinator is gone this long.",
    )
    log_tail_lines: int = Field(default=ReplicaSettings.log_tail_lines, ge=1, le=1000)
    worker_data_plane: DataPlane = Field(
        default=ReplicaSettings.data_plane,
        description="How replicas of one job on the same host move tensors: shared-memory "
        "(through shared memory; replicas on other hosts over gRPC) or grpc (all over gRPC).",
    )
    restart_max_restarts: int = Field(
        default=RestartSettings.max_restarts,
        ge=0,
        le=100,
        description="How often a job whose spec does not say is restarted from its newest "
        "checkpoint after a retryable failure (0: never, as before).",
    )
    restart_exit_codes: tuple[int, ...] = Field(
        default=RestartSettings.exit_codes,
        description="JSON list of replica exit codes that are retryable besides a replica "
        "killed by a signal (128 + N), e.g. [3]; a params or model error (exit 1) never is.",
    )
    peer_failure_settle_seconds: float = Field(
        default=RestartSettings.peer_failure_settle_seconds,
        ge=0,
        le=300,
        description="How long a replica that ended because a replica it called failed (exit "
        "4) waits for that replica's own end, which then says why the job failed.",
    )
    restart_backoff_seconds: float = Field(
        default=RestartSettings.backoff_seconds,
        ge=0,
        le=3600,
        description="Pause between a failed attempt's teardown and its requeue.",
    )
    preemption_policy: PreemptionPolicy = Field(
        default=PreemptionSettings.policy,
        description="lower-priority: a queued job that cannot fit preempts running jobs of its "
        "queue of strictly lower priority when that makes it fit, and a queue below its quota "
        "reclaims what other queues borrow; never: jobs wait, nothing is preempted.",
    )
    preemption_grace_seconds: float = Field(
        default=PreemptionSettings.grace_seconds,
        gt=0,
        le=3600,
        description="How long a preempted job's chief has to write its checkpoint-now before "
        "the gang is torn down anyway (it then resumes from its newest complete checkpoint).",
    )
    time_limit_grace_seconds: float = Field(
        default=TimeLimitSettings.grace_seconds,
        gt=0,
        le=3600,
        description="How long a job at its time limit has to write the checkpoint its chief is "
        "asked for before it ends TIMEOUT anyway (from its newest complete checkpoint).",
    )
    preemption_min_run_seconds: float = Field(
        default=PreemptionSettings.min_run_seconds,
        ge=0,
        le=86_400,
        description="A job preempted before runs at least this long of its next attempt before "
        "it can be preempted again, so jobs whose priorities change cannot thrash.",
    )
    http_max_body_bytes: int = Field(
        default=ServerSettings.http_max_body_bytes,
        ge=64 << 10,
        description="Largest REST request body; larger ones get 413 before they are read.",
    )
    backend: BackendName = Field(
        default="local",
        description="Where replicas run: local processes, pods through the Kubernetes API, or "
        "nowhere (sim: simulated replicas that start at once and run for num_steps x the sim "
        "step time, to try the scheduler and the restart and preemption rules at scale).",
    )
    sim_step_seconds: float = Field(
        default=SimSettings.step_seconds,
        ge=0,
        le=MAX_SIM_STEP_SECONDS,
        description="With the sim backend: seconds one simulated step takes (a job runs "
        "num_steps x this; 0: it ends as soon as it runs). A job's label "
        f"{SIM_STEP_SECONDS_LABEL} overrides it.",
    )
    sim_failure_rate: float = Field(
        default=SimSettings.failure_rate,
        ge=0,
        le=1,
        description="With the sim backend: the probability that a replica is killed (exit 137) "
        "during an attempt, at a step drawn uniformly from the steps the attempt has left; "
        "drawn anew for every attempt, so the restart policy decides what follows.",
    )
    sim_fail_at: str = Field(
        default="",
        max_length=4096,
        description="With the sim backend: REPLICA@STEP[,...], e.g. cs2-0@150: in every job "
        "with that replica, kill it (exit 137) once the job has done STEP steps, on the "
        "job's first attempt only (so a restart then succeeds).",
    )
    sim_seed: int | None = Field(
        default=SimSettings.seed,
        description="With the sim backend: seed of the injected failures (the same seed fails "
        "the same replicas of the same jobs at the same steps); unset: a new one each start.",
    )
    coordinator_address: str = Field(
        default=ServerSettings.coordinator_address,
        description="HOST:PORT replicas use to reach the coordinator's gRPC server; empty means "
        "127.0.0.1:<grpc port> (right for local processes, not for pods). Several, comma "
        "separated, for coordinators without a Service in front (two local ones): a replica "
        "calls the first that answers as leader.",
    )
    leader_election: Election = Field(
        default=LeaseSettings.election,
        description="How coordinators sharing a PostgreSQL store elect the one that acts: "
        "kubernetes (a coordination.k8s.io Lease), database (a lease row in PostgreSQL), auto "
        "(kubernetes with the kubernetes backend, database with PostgreSQL, off with SQLite), "
        "off (one coordinator, nothing fenced). SQLite allows one coordinator only.",
    )
    lease_name: str = Field(
        default=LeaseSettings.name,
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Name of the election lease (the Lease object, or the lease row).",
    )
    lease_duration_seconds: float = Field(
        default=LeaseTiming.duration,
        gt=0,
        le=300,
        description="A standby takes over a lease left unrenewed this long: with "
        "lease_retry_period_seconds, the longest time without a leader after one dies.",
    )
    lease_renew_deadline_seconds: float = Field(
        default=LeaseTiming.renew_deadline,
        gt=0,
        description="A leader that could not renew for this long stops acting (and exits); "
        "shorter than the lease duration, so it stops before a standby may start.",
    )
    lease_retry_period_seconds: float = Field(
        default=LeaseTiming.retry_period,
        gt=0,
        description="How often the leader renews and a standby looks at the lease.",
    )
    coordinator_id: str = Field(
        default=ServerSettings.coordinator_id,
        max_length=200,
        description="This coordinator's name in the election lease; empty = hostname and pid "
        "(the pod name in a cluster).",
    )
    queues_file: Path | None = Field(
        default=PoolSettings.queues_file,
        description="YAML defining the queues (`queues:` a list of name, systems, memoryx, "
        "weight, borrow_systems, borrow_memoryx, lend, groups), applied when it changes; "
        "run-time changes stand until then. Unset: the queues as stored (on a new appliance, "
        "one default queue owning the pool).",
    )
    fair_share_half_life_seconds: float = Field(
        default=SchedulerSettings.fair_share_half_life_seconds,
        gt=0,
        le=10 * 365 * 86_400.0,
        description="Queue usage counts half as much for fair share after this long.",
    )
    inventory_file: Path | None = Field(
        default=PoolSettings.inventory_file,
        description="YAML naming the pool (systems/memoryx/swarmx/workers name lists); it "
        "overrides the systems/memoryx_nodes/swarmx_nodes/worker_nodes counts.",
    )
    model_dirs_root: Path | None = Field(
        default=None,
        description="Where model dirs live: users/<user>/ and groups/<group>/ under it, made "
        "by the coordinator; unset = <data_dir>/model_dirs.",
    )
    model_dirs_allowed: tuple[Path, ...] = Field(
        default=ModelDirSettings.allowed,
        description="JSON list of directories outside the root where any user may put model "
        'dirs and read checkpoints (with authentication on), e.g. ["/scratch/shared"].',
    )
    replica_token_key_file: Path | None = Field(
        default=None,
        description="The secret key replica and data-plane tokens derive from (made if "
        "missing); unset = <data_dir>/replica-token.key. Must outlive the coordinator's pod.",
    )
    auth_tokens_file: Path | None = Field(
        default=AuthSettings.tokens_file,
        description="YAML file of hashed tokens (`appliance token create`); unset = auth off.",
    )
    audit_level: AuditLevel = Field(
        default=AuditSettings.level,
        description="What the audit log records of each mutating call and each refusal: None "
        "(nothing), Metadata (who, what, from where, the outcome), Request (and the request "
        "body's SHA-256 and size; never the body).",
    )
    audit_file: str | None = Field(
        default=AuditSettings.file,
        max_length=4096,
        description="Also write each audit record as a JSON line to this file (appended, "
        "made 0600), or to stdout with '-'; unset = the store only.",
    )
    audit_retention_days: float = Field(
        default=AuditSettings.retention_days,
        ge=0,
        le=36_500,
        description="Days audit records are kept in the store (pruned hourly); 0 = for ever.",
    )
    limits_enabled: bool = Field(
        default=LimitSettings.enabled,
        description="Per-user limits (streams, request rate, queued jobs) on; false turns "
        "every cap off.",
    )
    limits_file: Path | None = Field(
        default=LimitSettings.file,
        description="YAML file of per-user limits: defaults and overrides per user, group and "
        "queue (README: Per-user limits); followed on change. Unset = the built-in defaults.",
    )

    @field_validator("sim_fail_at")
    @classmethod
    def _fail_at_parses(cls, value: str) -> str:
        parse_fail_at(value)  # ValueError saying which entry is wrong
        return value

    @model_validator(mode="after")
    def _lease_timing_is_safe(self) -> Settings:
        """A leader must stop acting before a standby may start (domain/leadership.py)."""
        self.leases  # noqa: B018  (raises ValueError naming the rule)
        return self

    @model_validator(mode="after")
    def _allowed_dirs_are_apart(self) -> Settings:
        """A directory open to everyone must not take in anyone's own ones (nor the keys)."""
        root = self.model_dirs.root
        check_apart("model_dirs_allowed", self.model_dirs_allowed, root, self.data_dir)
        check_apart("data_dirs_allowed", self.data_dirs_allowed, root, self.data_dir)
        return self

    # ---- the groups (groups.py): each component takes one ------------------------------------

    @property
    def server(self) -> ServerSettings:
        return ServerSettings(
            self.host, self.grpc_port, self.http_port, self.http_max_body_bytes,
            self.coordinator_address, self.coordinator_id,
        )  # fmt: skip

    @property
    def tls(self) -> TlsSettings:
        return TlsSettings(
            self.tls_ca_dir or self.data_dir / "tls", self.data_dir / "tls", self.tls_cert_file,
            self.tls_ca_file, self.tls_key_file, self.tls_names,
            self.insecure, self.tls_client_ca_file,
        )  # fmt: skip

    @property
    def store(self) -> StoreSettings:
        return StoreSettings(self.data_dir, self.database_url)

    @property
    def inventory(self) -> PoolSettings:
        return PoolSettings(
            self.systems, self.memoryx_nodes, self.swarmx_nodes, self.memoryx_bytes,
            self.swarmx_ports, self.inventory_file, self.queues_file, self.worker_nodes,
            self.worker_slots, self.wafer_bytes,
        )  # fmt: skip

    @property
    def scheduler(self) -> SchedulerSettings:
        return SchedulerSettings(
            self.scheduler_interval, self.scheduler_max_admissions, self.scheduler_trace,
            self.fair_share_half_life_seconds,
        )  # fmt: skip

    @property
    def preemption(self) -> PreemptionSettings:
        return PreemptionSettings(
            self.preemption_policy, self.preemption_grace_seconds, self.preemption_min_run_seconds
        )

    @property
    def time_limits(self) -> TimeLimitSettings:
        return TimeLimitSettings(self.time_limit_grace_seconds)

    @property
    def restarts(self) -> RestartSettings:
        return RestartSettings(
            self.restart_max_restarts, self.restart_exit_codes, self.restart_backoff_seconds,
            self.peer_failure_settle_seconds,
        )  # fmt: skip

    @property
    def replicas(self) -> ReplicaSettings:
        return ReplicaSettings(
            self.cancel_grace_seconds, self.init_timeout_seconds, self.worker_orphan_timeout,
            self.log_tail_lines, self.worker_data_plane,
        )  # fmt: skip

    @property
    def sim(self) -> SimSettings:
        failures = parse_fail_at(self.sim_fail_at)
        return SimSettings(self.sim_step_seconds, self.sim_failure_rate, failures, self.sim_seed)

    @property
    def leases(self) -> LeaseSettings:
        timing = LeaseTiming(
            self.lease_duration_seconds,
            self.lease_renew_deadline_seconds,
            self.lease_retry_period_seconds,
        )
        return LeaseSettings(self.leader_election, self.lease_name, timing)

    @property
    def kube(self) -> KubeSettings:
        return KubeSettings(
            self.kube_namespace, self.kube_config, self.kube_image, self.kube_image_pull_policy,
            self.kube_clean_pod_policy, self.kube_pending_timeout_seconds,
            self.kube_request_timeout_seconds, self.kube_model_dirs_claim,
            self.kube_replica_memory_limit, self.kube_replica_resources,
            self.kube_watch_timeout_seconds, self.kube_data_sets_path, self.kube_data_sets_claim,
        )  # fmt: skip

    @property
    def model_dirs(self) -> ModelDirSettings:
        root = self.model_dirs_root or self.data_dir / "model_dirs"
        return ModelDirSettings(root, self.model_dirs_allowed)

    @property
    def data_dirs(self) -> DataDirSettings:
        return DataDirSettings(self.data_dirs_allowed)

    @property
    def auth(self) -> AuthSettings:
        key = self.replica_token_key_file or self.data_dir / "replica-token.key"
        return AuthSettings(self.auth_tokens_file, key, self.oidc)

    @property
    def audit(self) -> AuditSettings:
        return AuditSettings(self.audit_level, self.audit_file, self.audit_retention_days)

    @property
    def limits(self) -> LimitSettings:
        return LimitSettings(self.limits_enabled, self.limits_file)

    def pool(self) -> list[Node]:
        """The nodes: named by the inventory file, else as many as the counts say."""
        return pool_of(self.inventory)
