"""Input workers hold slots of the pool's worker nodes while their job runs, as the other
kinds do, shown by the nodes listing (csctl get nodes), REST and the dashboard's cluster page,
and given back when the job ends. On the simulated backend: no process is started."""

from __future__ import annotations

from pathlib import Path

import httpx

from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeKind
from appliance.domain.phases import Phase
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL
from tests.integration.coordinator.harness import serving, wait_until

SIM = {"backend": "sim", "sim_step_seconds": 0.0, "restart_backoff_seconds": 0.0}
FOREVER = {SIM_STEP_SECONDS_LABEL: "1"}  # with a million steps: until stopped


def test_a_data_set_job_holds_worker_slots_until_it_ends(tmp_path: Path) -> None:
    params = {
        "model": {"name": "fc_mnist", "hidden_sizes": [8]},
        "train_input": {"data_dir": str(tmp_path)},
        "runconfig": {"num_workers_per_csx": 3},
    }
    with (
        serving(tmp_path / "data", **SIM) as running,
        ApplianceClient(running.address, detach=True) as client,
    ):
        job = client.submit(params=params, num_csx=2, num_steps=1_000_000, labels=FOREVER)
        wait_until(lambda: job.status.phase is Phase.RUNNING, 30, "the job to run")
        workers = sorted(r.name for r in job.status.replicas if r.name.startswith("worker-"))
        assert workers == [f"worker-{k}" for k in range(6)]

        slots = {n.name: (n.used, n.capacity, n.jobs) for n in client.nodes()
                 if n.kind is NodeKind.WORKER}  # fmt: skip
        assert slots == {"worker-01": (3, 8, (job.id,)), "worker-02": (3, 8, (job.id,))}
        base = f"https://127.0.0.1:{running.coordinator.http_port}"
        groups = httpx.get(f"{base}/api/v1/nodegroups", timeout=30).json()["nodegroups"]
        (worker_group,) = [g for g in groups if g["kind"] == "worker"]
        assert (worker_group["nodes"], worker_group["capacity"], worker_group["used"]) == (
            2, 16, 6,
        )  # fmt: skip
        page = httpx.get(f"{base}/ui/cluster", timeout=30).text
        assert "Input-worker nodes (2)" in page and "6 slots of 16 slots" in page
        assert 'data-node="worker-01"' in page and "3 slots of 8 slots" in page

        job.cancel()
        wait_until(lambda: job.status.phase is Phase.CANCELLED, 30, "the job to end")
        wait_until(
            lambda: all(n.used == 0 for n in client.nodes() if n.kind is NodeKind.WORKER),
            30, "the slots to be given back",
        )  # fmt: skip
