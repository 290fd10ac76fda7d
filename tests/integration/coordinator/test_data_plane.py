"""Through the coordinator and the local backend: a job's replicas share memory by default,
say so in the job's replica detail, and `APPLIANCE_WORKER_DATA_PLANE=grpc` puts them back on
gRPC with the same result."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import serving
from tests.model_specs import ADAMW, FC, with_

PARAMS = with_(FC, optimizer=ADAMW)
STEPS = 30


def run_one(data_dir: Path, **settings: object) -> tuple[dict[str, str], Path]:
    """One 2-CS-2 job to its end: each replica's data plane as the job shows it, and its
    model dir."""
    with (
        serving(data_dir, **settings) as coordinator,
        ApplianceClient(coordinator.address, detach=True) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=2, num_steps=STEPS)
        final = job.wait(timeout=120)
    assert final.phase is Phase.SUCCEEDED, final.reason
    return {r.name: r.data_plane for r in final.replicas}, Path(final.spec.model_dir)


def test_replicas_share_memory_by_default_and_grpc_gives_the_same_weights(
    tmp_path: Path,
) -> None:
    shared, shared_dir = run_one(tmp_path / "shared")
    grpc, grpc_dir = run_one(tmp_path / "grpc", worker_data_plane="grpc")

    assert shared["chief-0"] == "shared memory: cs2-0, cs2-1, memoryx-0, swarmx-0"
    assert shared["swarmx-0"] == "shared memory: cs2-0, cs2-1, memoryx-0"
    assert all(line.startswith("shared memory: ") and "grpc" not in line for line in
               shared.values()), shared  # fmt: skip
    assert grpc["chief-0"] == "grpc (shared memory off): cs2-0, cs2-1, memoryx-0, swarmx-0"
    assert all(line.startswith("grpc (shared memory off): ") for line in grpc.values()), grpc

    with np.load(shared_dir / "weights.npz") as a, np.load(grpc_dir / "weights.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
