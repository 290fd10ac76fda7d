"""The real coordinator on the simulated backend (APPLIANCE_BACKEND=sim): jobs go through every
phase with no process started; preemption, injected failures, cancels and a coordinator
restart follow the same rules as with real replicas. The coordinator runs on the real clock
(the harness has no injected one): step times are milliseconds, and every wait is on a
condition of the job."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeKind
from appliance.domain.job import ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until

PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [8]},
    "runconfig": {"checkpoint_steps": 100},
}
SIM = {"backend": "sim", "sim_step_seconds": 0.0, "restart_backoff_seconds": 0.0}
FOREVER = {SIM_STEP_SECONDS_LABEL: "1"}  # with a million steps: until stopped


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", **SIM) as running:
        yield running


@pytest.fixture
def client(coordinator: RunningCoordinator) -> Iterator[ApplianceClient]:
    with ApplianceClient(coordinator.address, detach=True) as c:
        yield c


def test_a_zero_time_job_goes_from_queued_to_succeeded(client: ApplianceClient) -> None:
    job = client.submit(params=PARAMS, num_csx=1, num_steps=10)
    final = job.wait(timeout=30)
    phases = [e.to_phase for e in job.events()]
    assert phases == [
        Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED,
    ]  # fmt: skip
    assert (final.progress.step, final.attempt) == (10, 1)
    assert {(r.phase, r.exit_code) for r in final.replicas} == {(ReplicaPhase.SUCCEEDED, 0)}
    chief = next(r for r in final.replicas if r.name == "chief-0")
    assert "step 10/10" in chief.log_tail


def test_a_p1_job_preempts_a_p3_job_which_resumes_from_its_checkpoint(
    client: ApplianceClient,
) -> None:
    victim = client.submit(
        params=PARAMS, num_csx=4, num_steps=1000, priority="p3",
        labels={SIM_STEP_SECONDS_LABEL: "0.004"},
    )  # fmt: skip
    wait_until(lambda: victim.status.progress.step >= 150, 30, "the P3 job to train")
    urgent = client.submit(params=PARAMS, num_csx=2, num_steps=10, priority="p1")
    done = urgent.wait(timeout=30)
    final = victim.wait(timeout=60)

    assert (final.attempt, final.restarts) == (2, 1)
    requeue = next(e for e in victim.events() if e.to_phase is Phase.QUEUED and e.from_phase)
    written = re.fullmatch(
        rf"preempted by {urgent.id} \(P1\); checkpointed at step (\d+); requeued at position \d+",
        requeue.reason,
    )
    assert written, requeue.reason
    step = int(written[1])
    first, second = final.attempts
    assert step >= 150 and (first.resumed_from, second.resumed_from) == (0, step)
    assert final.progress.resumed_from_step == step and final.progress.step == 1000
    assert done.started_at < second.scheduled_at


def test_an_injected_failure_restarts_the_job_once_and_it_succeeds(tmp_path: Path) -> None:
    with (
        serving(tmp_path / "data", **SIM, sim_fail_at="cs2-0@250") as running,
        ApplianceClient(running.address, detach=True) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=1, num_steps=400, max_restarts=1)
        final = job.wait(timeout=30)
    assert (final.attempt, final.restarts) == (2, 1)
    first, second = final.attempts
    assert first.reason.startswith(
        "replica cs2-0 exited with exit code 137 (killed by SIGKILL (simulated: "
        "APPLIANCE_SIM_FAIL_AT cs2-0@250)); restarting from step 200 (restart 1 of 1)"
    ), first.reason
    assert (first.ended_in, second.resumed_from) == (Phase.QUEUED, 200)


def test_cancelling_a_running_job_stops_its_replicas_and_frees_its_systems(
    client: ApplianceClient,
) -> None:
    job = client.submit(params=PARAMS, num_csx=4, num_steps=10**6, labels=FOREVER)
    wait_until(lambda: job.status.phase is Phase.RUNNING, 30, "the job to run")
    assert job.cancel(reason="enough").changed

    def stopped() -> bool:
        return {(r.phase, r.exit_code) for r in job.status.replicas} == {
            (ReplicaPhase.STOPPED, 143)
        }

    wait_until(stopped, 30, "every replica to be stopped")
    assert job.status.phase is Phase.CANCELLED
    systems = [n for n in client.nodes() if n.kind is NodeKind.SYSTEM]
    assert [n.used for n in systems] == [0] * 4
    after = client.submit(params=PARAMS, num_csx=4, num_steps=10).wait(timeout=30)
    assert after.phase is Phase.SUCCEEDED


@pytest.mark.parametrize(("max_restarts", "phase"), [(1, Phase.RUNNING), (0, Phase.FAILED)])
def test_a_coordinator_restart_loses_the_replicas_and_the_restart_policy_decides(
    tmp_path: Path, max_restarts: int, phase: Phase
) -> None:
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir, **SIM).start()
    second = None
    try:
        with ApplianceClient(first.address, detach=True) as client:
            job = client.submit(
                params=PARAMS, num_csx=1, num_steps=10**6, labels=FOREVER,
                max_restarts=max_restarts,
            )  # fmt: skip
            wait_until(lambda: job.status.phase is Phase.RUNNING, 30, "the job to run")
        port = first.coordinator.grpc_port
        first.stop()

        second = RunningCoordinator(data_dir, grpc_port=port, **SIM).start()
        with ApplianceClient(second.address, detach=True) as client:
            attempt = 1 + max_restarts  # lost, then run again if its policy allows

            def settled() -> bool:
                status = client.get_job(job.id)
                return (status.phase, status.attempt) == (phase, attempt)

            wait_until(settled, 30, f"attempt {attempt} of the job {phase}")
            status = client.get_job(job.id)
            gone = "replicas gone after a coordinator restart: chief-0, cs2-0"
            if max_restarts:
                assert status.attempts[0].reason.startswith(gone), status.attempts[0].reason
                client.cancel_job(job.id)
            else:
                assert status.reason.startswith(gone), status.reason
    finally:
        (second or first).stop()
