"""Command line of a replica process: `python -m appliance.workers <role> [options]`.

Options fall back to environment variables (APPLIANCE_JOB_ID, APPLIANCE_REPLICA,
APPLIANCE_COORDINATOR, APPLIANCE_ORPHAN_TIMEOUT, APPLIANCE_ERROR_FILE), which is how the Kubernetes
backend passes them. A replica that fails ends with one line saying why, last on stderr and
in the error file (domain/replica_errors.py), whatever raised.
The job's credentials come only from the environment (APPLIANCE_DATAPLANE_TOKEN, and
APPLIANCE_REPLICA_TOKEN with authentication on): a command line is readable by every local user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from appliance.domain.replica_errors import ERROR_FILE_ENV, error_of

if TYPE_CHECKING:
    from appliance.workers.runtime import ReplicaRole, WorkerOptions
    from appliance.workers.transport.channels import PeerChannels

# "worker": an input worker; worker-k feeds CS-2 k // num_workers_per_csx (roles/input_worker).
ROLES = ("chief", "cs2", "memoryx", "swarmx", "worker")
_REPLICA_NAME = re.compile(r"^(chief|cs2|memoryx|swarmx|worker)-(\d+)$")


def build_role(options: WorkerOptions, channels: PeerChannels) -> ReplicaRole:
    """The role object for a replica name such as `cs2-1` (its index comes from the name)."""
    match = _REPLICA_NAME.match(options.replica)
    if match is None or match.group(1) != options.role:
        raise click.BadParameter(
            f"replica {options.replica!r} is not a {options.role}-<index> name",
            param_hint="--replica",
        )
    index = int(match.group(2))
    from appliance.workers.roles.chief import ChiefRole
    from appliance.workers.roles.cs2 import CS2Role
    from appliance.workers.roles.input_worker import InputWorkerRole
    from appliance.workers.roles.memoryx import MemoryXRole
    from appliance.workers.roles.swarmx import SwarmXRole

    if options.role == "chief":
        return ChiefRole(options.replica, options.step_timeout, channels)
    if options.role == "cs2":
        return CS2Role(index, options.step_timeout, channels)
    if options.role == "memoryx":
        return MemoryXRole(index)
    if options.role == "worker":
        return InputWorkerRole(index)
    return SwarmXRole(index, options.step_timeout, channels)


@click.command()
@click.argument("role", type=click.Choice(ROLES))
@click.option("--job-id", envvar="APPLIANCE_JOB_ID", required=True, help="wsjob-... id")
@click.option("--replica", envvar="APPLIANCE_REPLICA", required=True, help="e.g. cs2-1")
@click.option(
    "--coordinator",
    envvar="APPLIANCE_COORDINATOR",
    required=True,
    help="HOST:PORT of ReplicaControl",
)
@click.option(
    "--orphan-timeout",
    envvar="APPLIANCE_ORPHAN_TIMEOUT",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="exit with code 3 once the coordinator is unreachable for this many seconds",
)
@click.option(
    "--exit-file",
    envvar="APPLIANCE_EXIT_FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="write the exit code here on the way out (lets a restarted coordinator learn it)",
)
@click.option(
    "--error-file",
    envvar=ERROR_FILE_ENV,
    type=click.Path(dir_okay=False),
    default=None,
    help="write the last error line here when failing (a pod's termination message)",
)
@click.option(
    "--data-plane",
    envvar="APPLIANCE_DATA_PLANE",
    type=click.Choice(["shared-memory", "grpc"]),
    default="shared-memory",
    show_default=True,
    help="shared-memory: co-located replicas of the job talk through shared memory, others "
    "over gRPC; grpc: everything over gRPC",
)
@click.option(
    "--step-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="deadline of one step's data-plane calls",
)
def main(
    role: str,
    job_id: str,
    replica: str,
    coordinator: str,
    orphan_timeout: float,
    exit_file: str | None,
    error_file: str | None,
    step_timeout: float,
    data_plane: str,
) -> None:
    """Run one replica of a wsjob until it finishes, is told to stop, or fails."""
    # One BLAS thread, whatever the environment says: the thread count changes a product's
    # rounding (appliance.workers.models.numerics), and many replicas share a host (spinning BLAS
    # thread pools made a 2-CS-2 job 3x slower). Before NumPy loads, hence the imports below.
    from appliance.workers.models.numerics import limit_loaded_blas, pin_blas_threads

    pin_blas_threads(os.environ)
    from appliance.workers.allocator import keep_tensor_buffers
    from appliance.workers.lifecycle import EXIT_FAILED, Ending
    from appliance.workers.runtime import WorkerOptions, run_replica
    from appliance.workers.transport.job_credential import MissingCredential, dataplane_token
    from appliance.workers.transport.replica_tls import IdentityError, ReplicaTls

    try:
        token = dataplane_token(os.environ)
        tls = ReplicaTls.from_environ(os.environ, job_id)
    except (MissingCredential, IdentityError) as exc:
        raise click.UsageError(str(exc)) from None

    limit_loaded_blas()  # NumPy is loaded by now

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {replica} %(levelname)s %(name)s: %(message)s",
    )
    keep_tensor_buffers()  # before the first tensor message
    if data_plane == "shared-memory":  # co-located peers wake each other: see batch_scheduling
        batch_scheduling()
    options = WorkerOptions(
        role=role,
        job_id=job_id,
        replica=replica,
        coordinator=coordinator,
        orphan_timeout=orphan_timeout,
        step_timeout=step_timeout,
        dataplane_token=token,
        tls=tls,
    )
    from appliance.workers.transport.channels import PeerChannels

    channels = PeerChannels(token, shared_memory=data_plane == "shared-memory", tls=tls)
    replica_role = build_role(options, channels)
    try:
        ending = asyncio.run(run_replica(options, replica_role, channels))
    except Exception as exc:  # the top level: the traceback for the log, then one line why
        traceback.print_exc()
        ending = Ending(EXIT_FAILED, error_of(exc))
    finish(ending.code, exit_file, ending.error, error_file)


def batch_scheduling() -> None:
    """Schedule this replica as a batch process (SCHED_BATCH): a peer it wakes with a message
    (a frame on a socket, a gRPC call) then no longer preempts it on the spot. Replicas of a
    job on one host wake each other several times a step; with the normal policy each wake-up
    handed the core to the woken peer mid-send (a 0.1 ms send, measured), and the job's
    replicas spent their steps trading cores. Measured (bench.weight_streaming, fc_mnist,
    shared memory, 3 A/B pairs): 2 CS-2s 131 -> 147 steps/s, 4 CS-2s 54 -> 74; 1 CS-2 the
    same within the noise. Where the policy cannot be set, the replica runs as it is."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (OSError, AttributeError) as err:
        logging.getLogger(__name__).info("normal scheduling (no SCHED_BATCH: %s)", err)


def finish(
    code: int, exit_file: str | None, error: str = "", error_file: str | None = None
) -> NoReturn:
    """End the process with `code`, its own decision: a SIGTERM from here on (the teardown of a
    job whose chief just told this replica to stop) must not turn a clean end into "killed by
    SIGTERM". The event loop that handled SIGTERM is closed by now, so the signal's default
    action would kill the process while the interpreter shuts down; it is ignored instead (a
    hung exit still meets the teardown's SIGKILL). A failure's `error` line goes last on
    stderr and into `error_file`."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if error:
        logging.shutdown()  # the logs flushed before it
        print(error, file=sys.stderr, flush=True)
        if error_file:
            with contextlib.suppress(OSError):  # the line on stderr says it still
                Path(error_file).write_text(f"{error}\n")
    if exit_file:
        Path(exit_file).write_text(f"{code}\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
