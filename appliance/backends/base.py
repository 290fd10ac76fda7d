"""The Backend protocol: how the reconciler starts, watches, stops and re-finds replicas."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Protocol

from appliance.domain.inventory import Node
from appliance.domain.job import Job, Replica
from appliance.domain.leadership import LeaseLock


class BackendUnavailable(Exception):
    """The backend cannot act now (its API is down); the same call may succeed later."""


class ReplicaEventKind(enum.Enum):
    STARTED = "started"
    EXITED = "exited"


@dataclasses.dataclass(frozen=True)
class ReplicaEvent:
    """A replica's process or pod started or ended.

    exit_code follows the shell and Kubernetes convention: 128 + signal for a replica killed by
    a signal; None when it cannot be known (a replica adopted after a restart).
    """

    job_id: str
    replica: str
    kind: ReplicaEventKind
    pid: int = 0
    exit_code: int | None = None
    message: str = ""
    # The job's attempt the replica was started for (0: not known, e.g. adopted after a
    # restart); an event of an earlier attempt than the job's is stale.
    attempt: int = 0
    # Lost with its pod or node (evicted, deleted, node gone) rather than ended by itself: a
    # retryable failure even though no exit code says so.
    lost: bool = False
    # Why a replica that failed by itself did, in its own last error line (bounded, escaped:
    # domain/replica_errors.py); "" when it said nothing or did not fail.
    last_error: str = ""


class Backend(Protocol):
    # HOST:PORT replicas dial; the coordinator sets it once its gRPC port is known.
    coordinator_address: str
    # The secret part of the environment of a job's replicas, by job id and attempt: its
    # data-plane token (one per attempt: replicas of an earlier attempt cannot reach the new
    # one's) and, with authentication on, its replica token (server/replica_tokens.py). Kept
    # out of command lines and pod specs: a Kubernetes backend puts it in a Secret.
    replica_secrets: Callable[[str, int], Mapping[str, str]]
    # The environment of one replica's own certificate for the data plane, by job id, attempt
    # and replica name (server/replica_identity.py); empty when the coordinator serves
    # plaintext. Kept out of command lines and pod specs, and from the job's other replicas.
    replica_identity: Callable[[str, int, str], Mapping[str, str]]
    # ---- what only some backends do (OptionalParts gives the others' answers) ----------------
    # Whether its replicas write into the jobs' model directories (the coordinator makes
    # each owner's directory, with its mode, before they start); the simulated one's do not.
    writes_model_dirs: bool
    # Whether its replicas read the jobs' data sets from the filesystem the coordinator sees
    # (local processes): a submit then refuses a data_dir that is not a directory there. Pods
    # read them from a volume the coordinator does not mount; simulated replicas read nothing.
    shares_data_dirs: bool
    # How long a replica may wait to start before the backend fails it (a pod waiting for a
    # node or an image), which a job's init timeout adds to; 0: replicas start at once.
    start_timeout: float
    # Seconds one step of a job takes when the backend only simulates them (the start
    # estimates of jobs that do not say); None: a real backend, whose steps take what they take.
    simulated_step_seconds: float | None

    async def fit_problem(self, pool: Sequence[Node]) -> str | None:
        """Why the pool's largest job cannot fit where replicas run (warned of at start), or
        None."""

    def lease_lock(self, name: str) -> LeaseLock | None:
        """The leader-election lease `name` in the cluster the replicas run in, or None when
        there is none (the lease then lives in the database)."""

    async def launch(self, job: Job, replicas: Sequence[Replica]) -> None:
        """Start every replica of the job (idempotent for replicas already running)."""

    def observe(self) -> AsyncIterator[ReplicaEvent]:
        """Replica state changes, for as long as the backend is open."""

    async def teardown(self, job_id: str, *, failed: bool = False) -> None:
        """Stop every replica of the job: SIGTERM (or pod delete), then force after a grace.
        `failed`: the job ended FAILED (a backend may keep its objects for debugging)."""

    async def adopt(self) -> dict[str, set[str]]:
        """After a restart: the replicas still running, by job id, now watched again."""

    def exit_codes(self, job_id: str) -> dict[str, int]:
        """After a restart: exit codes of the job's replicas that ended while nobody watched."""

    async def away_error(self, job_id: str, replica: str) -> str:
        """After a restart: the last error line (domain/replica_errors.py) of a replica of the
        job that failed while nobody watched; "" when it left none."""

    async def log_tail(self, job_id: str, replica: str, lines: int) -> str:
        """The last lines of a replica's log."""

    async def read_log(self, job_id: str, replica: str, offset: int) -> tuple[str, int]:
        """A replica's log from byte `offset` on (complete lines only) and the next offset."""

    def health(self) -> str | None:
        """None while replicas can be started and watched; else what is wrong, in a sentence."""

    async def close(self) -> None:
        """Stop watching; replicas keep running (a restarted coordinator adopts them)."""


class OptionalParts:
    """The answers of a backend that does none of the optional parts of the protocol: a backend
    inherits them and overrides what it does."""

    writes_model_dirs: bool = True
    shares_data_dirs: bool = False
    start_timeout: float = 0.0
    simulated_step_seconds: float | None = None

    async def fit_problem(self, pool: Sequence[Node]) -> str | None:
        return None

    def lease_lock(self, name: str) -> LeaseLock | None:
        return None

    async def away_error(self, job_id: str, replica: str) -> str:
        return ""


def no_secrets(job_id: str, attempt: int) -> Mapping[str, str]:
    """Until the coordinator sets `replica_secrets`: replicas started with it refuse to run."""
    return {}


def no_identity(job_id: str, attempt: int, replica: str) -> Mapping[str, str]:
    """No certificate: the data plane keeps its token only (the coordinator is --insecure)."""
    return {}
