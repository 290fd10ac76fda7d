"""The one settings object, read once at start-up (APPLIANCE_ environment prefix)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from appliance.domain.inventory import Node, default_pool, named_pool
from appliance.domain.leadership import LeaseTiming
from appliance.domain.simulation import FailAt, parse_fail_at
from appliance.domain.spec import MAX_SIM_STEP_SECONDS, SIM_STEP_SECONDS_LABEL

DEFAULT_GRPC_PORT = 50051
DEFAULT_HTTP_PORT = 8080


# Kubernetes quantities as the settings accept them (a bounded number of digits).
CPU_QUANTITY = r"^([0-9]{1,7}m|[0-9]{1,4}(\.[0-9]{1,3})?)$"
MEMORY_QUANTITY = r"^[0-9]{1,12}(\.[0-9]{1,3})?(Ki|Mi|Gi|Ti|k|M|G|T)?$"


class RoleResources(BaseModel):
    """What one replica pod of a role requests; an unset key keeps the backend's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str | None = Field(
        default=None, pattern=CPU_QUANTITY, description="CPU request, e.g. 250m or 1.5."
    )
    memory: str | None = Field(
        default=None, pattern=MEMORY_QUANTITY, description="Memory request, e.g. 512Mi."
    )

    @field_validator("cpu", mode="before")
    @classmethod
    def _cores_as_text(cls, value: object) -> object:
        """`--set replicaResources.cs2.cpu=1` arrives as a number: cores, as Kubernetes reads
        it (then checked against the pattern like any other)."""
        if isinstance(value, bool):
            return value  # refused by the str type, not taken for 1 core
        if isinstance(value, int | float):
            return f"{value:.3f}".rstrip("0").rstrip(".")
        return value


class ReplicaResources(BaseModel):
    """Requests of the replica pods, by role (the Kubernetes backend's defaults where unset:
    chief 100m/256Mi, cs2 500m/512Mi, memoryx 250m/512Mi, swarmx 250m/256Mi)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chief: RoleResources = RoleResources()
    cs2: RoleResources = RoleResources()
    memoryx: RoleResources = RoleResources()
    swarmx: RoleResources = RoleResources()


class Settings(BaseSettings):
    """Coordinator settings. Every field can be set as APPLIANCE_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="APPLIANCE_", frozen=True)

    data_dir: Path = Field(
        default=Path(".appliance"),
        description="Where the SQLite store, replica logs and default model dirs live.",
    )
    database_url: str = Field(
        default="",
        description="Any SQLAlchemy URL (postgresql://...); empty means SQLite in data_dir.",
    )
    host: str = Field(default="127.0.0.1", description="Address the servers listen on.")
    grpc_port: int = Field(default=DEFAULT_GRPC_PORT, ge=0, le=65535, description="0 = free port")
    http_port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535, description="0 = free port")
    systems: int = Field(default=4, ge=1, le=4096, description="Number of CS-2 systems.")
    memoryx_nodes: int = Field(default=4, ge=1, le=4096, description="Number of MemoryX nodes.")
    swarmx_nodes: int = Field(default=2, ge=1, le=4096, description="Number of SwarmX nodes.")
    memoryx_bytes: int = Field(default=16 << 30, gt=0, description="Memory per MemoryX node.")
    swarmx_ports: int = Field(default=4, ge=1, description="CS-2 ports per SwarmX node (fan-out).")
    scheduler_interval: float = Field(
        default=2.0, gt=0, description="Seconds between scheduler passes when nothing wakes it."
    )
    scheduler_max_admissions: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="Jobs one scheduler pass admits at most; the next pass follows at once and "
        "goes on from there (so that no pass holds the coordinator long, like Slurm's "
        "default_queue_depth).",
    )
    scheduler_trace: Path | None = Field(
        default=None,
        description="A file to append one JSON line per scheduler pass to (when it started, "
        "its seconds, the jobs it admitted and the jobs queued): for benchmarks and tuning.",
    )
    cancel_grace_seconds: float = Field(
        default=5.0, ge=0, description="SIGTERM to SIGKILL grace when replicas are stopped."
    )
    init_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A job not RUNNING this long after SCHEDULED fails (on Kubernetes, this "
        "long after kube_pending_timeout_seconds, which its pods may take to start).",
    )
    worker_orphan_timeout: float = Field(
        default=60.0, gt=0, description="Replicas exit when the coordinator is gone this long."
    )
    log_tail_lines: int = Field(default=20, ge=1, le=1000)
    restart_max_restarts: int = Field(
        default=0,
        ge=0,
        le=100,
        description="How often a job whose spec does not say is restarted from its newest "
        "checkpoint after a retryable failure (0: never, as before).",
    )
    restart_exit_codes: tuple[int, ...] = Field(
        default=(),
        description="JSON list of replica exit codes that are retryable besides a replica "
        "killed by a signal (128 + N), e.g. [3]; a params or model error (exit 1) never is.",
    )
    peer_failure_settle_seconds: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="How long a replica that ended because a replica it called failed (exit "
        "4) waits for that replica's own end, which then says why the job failed.",
    )
    restart_backoff_seconds: float = Field(
        default=1.0,
        ge=0,
        le=3600,
        description="Pause between a failed attempt's teardown and its requeue.",
    )
    preemption_policy: Literal["lower-priority", "never"] = Field(
        default="lower-priority",
        description="lower-priority: a queued job that cannot fit preempts running jobs of its "
        "queue of strictly lower priority when that makes it fit, and a queue below its quota "
        "reclaims what other queues borrow; never: jobs wait, nothing is preempted.",
    )
    preemption_grace_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="How long a preempted job's chief has to write its checkpoint-now before "
        "the gang is torn down anyway (it then resumes from its newest complete checkpoint).",
    )
    preemption_min_run_seconds: float = Field(
        default=60.0,
        ge=0,
        le=86_400,
        description="A job preempted before runs at least this long of its next attempt before "
        "it can be preempted again, so jobs whose priorities change cannot thrash.",
    )
    http_max_body_bytes: int = Field(
        default=4 << 20,
        ge=64 << 10,
        description="Largest REST request body; larger ones get 413 before they are read.",
    )
    backend: Literal["local", "kubernetes", "sim"] = Field(
        default="local",
        description="Where replicas run: local processes, pods through the Kubernetes API, or "
        "nowhere (sim: simulated replicas that start at once and run for num_steps x the sim "
        "step time, to try the scheduler and the restart and preemption rules at scale).",
    )
    sim_step_seconds: float = Field(
        default=0.01,
        ge=0,
        le=MAX_SIM_STEP_SECONDS,
        description="With the sim backend: seconds one simulated step takes (a job runs "
        "num_steps x this; 0: it ends as soon as it runs). A job's label "
        f"{SIM_STEP_SECONDS_LABEL} overrides it.",
    )
    sim_failure_rate: float = Field(
        default=0.0,
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
        default=None,
        description="With the sim backend: seed of the injected failures (the same seed fails "
        "the same replicas of the same jobs at the same steps); unset: a new one each start.",
    )
    coordinator_address: str = Field(
        default="",
        description="HOST:PORT replicas use to reach the coordinator's gRPC server; empty means "
        "127.0.0.1:<grpc port> (right for local processes, not for pods). Several, comma "
        "separated, for coordinators without a Service in front (two local ones): a replica "
        "calls the first that answers as leader.",
    )
    leader_election: Literal["auto", "off", "database", "kubernetes"] = Field(
        default="auto",
        description="How coordinators sharing a PostgreSQL store elect the one that acts: "
        "kubernetes (a coordination.k8s.io Lease), database (a lease row in PostgreSQL), auto "
        "(kubernetes with the kubernetes backend, database with PostgreSQL, off with SQLite), "
        "off (one coordinator, nothing fenced). SQLite allows one coordinator only.",
    )
    lease_name: str = Field(
        default="appliance-leader",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Name of the election lease (the Lease object, or the lease row).",
    )
    lease_duration_seconds: float = Field(
        default=8.0,
        gt=0,
        le=300,
        description="A standby takes over a lease left unrenewed this long: with "
        "lease_retry_period_seconds, the longest time without a leader after one dies.",
    )
    lease_renew_deadline_seconds: float = Field(
        default=5.0,
        gt=0,
        description="A leader that could not renew for this long stops acting (and exits); "
        "shorter than the lease duration, so it stops before a standby may start.",
    )
    lease_retry_period_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often the leader renews and a standby looks at the lease.",
    )
    coordinator_id: str = Field(
        default="",
        max_length=200,
        description="This coordinator's name in the election lease; empty = hostname and pid "
        "(the pod name in a cluster).",
    )
    kube_namespace: str = Field(
        default="",
        description="Namespace of the job pods; empty means the pod's own namespace in-cluster, "
        "else the kubeconfig context's namespace, else `default`.",
    )
    kube_config: Path | None = Field(
        default=None,
        description="kubeconfig file; unset means in-cluster config, else ~/.kube/config.",
    )
    kube_image: str = Field(
        default="appliance:dev", description="Image of the replica pods (the appliance image)."
    )
    kube_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="imagePullPolicy of the replica pods."
    )
    kube_clean_pod_policy: Literal["all", "keep-failed"] = Field(
        default="all",
        description="What to delete when a job ends: every object, or all but failed jobs' pods "
        "(kept for debugging until the job's ConfigMap is deleted).",
    )
    kube_pending_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A replica pod waiting this long (e.g. ImagePullBackOff) fails its job.",
    )
    kube_request_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Timeout of one Kubernetes API call."
    )
    kube_model_dirs_claim: str = Field(
        default="",
        description="PersistentVolumeClaim (ReadWriteMany) mounted at the model dirs root in "
        "every replica pod, so checkpoints outlive the pods; empty = an emptyDir per pod.",
    )
    kube_replica_memory_limit: str = Field(
        default="4Gi",
        pattern=MEMORY_QUANTITY,
        description="Memory limit of every replica pod's container (a Kubernetes quantity).",
    )
    kube_replica_resources: ReplicaResources = Field(
        default=ReplicaResources(),
        description="JSON of the replica pods' requests by role, e.g. "
        '{"cs2": {"cpu": "250m", "memory": "512Mi"}}; a job is scheduled only when the nodes '
        "have them free, and the coordinator warns at start when its largest job cannot fit.",
    )
    kube_watch_timeout_seconds: int = Field(
        default=300,
        ge=1,
        description="The pod watch is renewed from its last resourceVersion this often.",
    )
    queues_file: Path | None = Field(
        default=None,
        description="YAML defining the queues (`queues:` a list of name, systems, memoryx, "
        "weight, borrow_systems, borrow_memoryx, lend, groups), applied when it changes; "
        "run-time changes stand until then. Unset: the queues as stored (on a new appliance, "
        "one default queue owning the pool).",
    )
    fair_share_half_life_seconds: float = Field(
        default=7 * 86_400.0,
        gt=0,
        le=10 * 365 * 86_400.0,
        description="Queue usage counts half as much for fair share after this long.",
    )
    inventory_file: Path | None = Field(
        default=None,
        description="YAML naming the pool (systems/memoryx/swarmx name lists); it overrides "
        "the systems/memoryx_nodes/swarmx_nodes counts.",
    )
    model_dirs_root: Path | None = Field(
        default=None,
        description="Where model dirs live: users/<user>/ and groups/<group>/ under it, made "
        "by the coordinator; unset = <data_dir>/model_dirs.",
    )
    model_dirs_allowed: tuple[Path, ...] = Field(
        default=(),
        description="JSON list of directories outside the root where any user may put model "
        'dirs and read checkpoints (with authentication on), e.g. ["/scratch/shared"].',
    )
    replica_token_key_file: Path | None = Field(
        default=None,
        description="The secret key replica and data-plane tokens derive from (made if "
        "missing); unset = <data_dir>/replica-token.key. Must outlive the coordinator's pod.",
    )
    auth_tokens_file: Path | None = Field(
        default=None,
        description="YAML file of hashed tokens (`appliance token create`); unset = auth off.",
    )

    @field_validator("sim_fail_at")
    @classmethod
    def _fail_at_parses(cls, value: str) -> str:
        parse_fail_at(value)  # ValueError saying which entry is wrong
        return value

    @model_validator(mode="after")
    def _lease_timing_is_safe(self) -> Settings:
        """A leader must stop acting before a standby may start (domain/leadership.py)."""
        self.lease_timing  # noqa: B018  (raises ValueError naming the rule)
        return self

    @model_validator(mode="after")
    def _allowed_dirs_are_apart(self) -> Settings:
        """An allowed directory shared by everyone must not take in anyone's own ones."""
        root = self.model_dirs.resolve()
        for allowed in self.model_dirs_allowed:
            shared = allowed.resolve()
            if not allowed.is_absolute() or root.is_relative_to(shared) or shared == Path("/"):
                raise ValueError(
                    f"model_dirs_allowed: {str(allowed)!r} must be an absolute directory "
                    f"that does not hold the model dirs root {root}"
                )
            if shared.is_relative_to(root) or self.data_dir.resolve().is_relative_to(shared):
                raise ValueError(
                    f"model_dirs_allowed: {str(allowed)!r} must lie apart from the model dirs "
                    f"root {root} and the data dir"
                )
        return self

    @property
    def replica_start_timeout(self) -> float:
        """How long a replica may wait to start before its backend fails it, which a job's
        init timeout adds to: a pod's pending timeout (waiting for a node, an image) on
        Kubernetes; local processes start at once."""
        return self.kube_pending_timeout_seconds if self.backend == "kubernetes" else 0.0

    @property
    def sim_failures(self) -> tuple[FailAt, ...]:
        """APPLIANCE_SIM_FAIL_AT, parsed."""
        return parse_fail_at(self.sim_fail_at)

    @property
    def lease_timing(self) -> LeaseTiming:
        return LeaseTiming(
            self.lease_duration_seconds,
            self.lease_renew_deadline_seconds,
            self.lease_retry_period_seconds,
        )

    @property
    def election(self) -> Literal["off", "database", "kubernetes"]:
        """The election `leader_election` comes to with this store and backend."""
        if self.leader_election != "auto":
            return self.leader_election
        if not self.sqlalchemy_url.startswith("postgresql"):
            return "off"
        return "kubernetes" if self.backend == "kubernetes" else "database"

    @property
    def model_dirs(self) -> Path:
        return self.model_dirs_root or self.data_dir / "model_dirs"

    @property
    def replica_key_file(self) -> Path:
        return self.replica_token_key_file or self.data_dir / "replica-token.key"

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'appliance.db').resolve()}"

    def pool(self) -> list[Node]:
        if self.inventory_file is not None:
            return read_inventory(
                self.inventory_file,
                memoryx_bytes=self.memoryx_bytes,
                swarmx_ports=self.swarmx_ports,
            )
        return default_pool(
            systems=self.systems,
            memoryx=self.memoryx_nodes,
            swarmx=self.swarmx_nodes,
            memoryx_bytes=self.memoryx_bytes,
            swarmx_ports=self.swarmx_ports,
        )


class InventoryFile(BaseModel):
    """The pool by name, as the Helm chart's ConfigMap writes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    systems: list[str] = Field(min_length=1)
    memoryx: list[str] = Field(min_length=1)
    swarmx: list[str] = Field(min_length=1)


class InventoryError(ValueError):
    """The inventory file cannot be used; the message says what to fix."""


def read_inventory(path: Path, *, memoryx_bytes: int, swarmx_ports: int) -> list[Node]:
    """Read an inventory YAML (`systems:`, `memoryx:`, `swarmx:` lists of node names)."""
    try:
        raw = yaml.safe_load(path.read_text())
        inventory = InventoryFile.model_validate(raw)
    except OSError as e:
        raise InventoryError(f"cannot read the inventory file {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise InventoryError(f"inventory file {path} is not YAML: {e}") from e
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InventoryError(
            f"inventory file {path}: {where}: {first['msg']} "
            "(expected lists of names under systems, memoryx and swarmx)"
        ) from e
    names = inventory.systems + inventory.memoryx + inventory.swarmx
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise InventoryError(f"inventory file {path}: names used twice: {', '.join(duplicated)}")
    return named_pool(
        inventory.systems,
        inventory.memoryx,
        inventory.swarmx,
        memoryx_bytes=memoryx_bytes,
        swarmx_ports=swarmx_ports,
    )
