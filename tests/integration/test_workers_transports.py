"""The same job over either transport gives the same bits: all gRPC, all shared memory, and a
job that mixes them (some replicas with shared memory off reach, and are reached by,
everyone over gRPC while the rest share memory among themselves).

The transport is chosen per replica (APPLIANCE_DATA_PLANE, as the backends set it) and said
in each replica's log ("data plane: shared memory: ...; grpc: ..."), which these tests read to
be sure each run really went the way it claims.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from appliance.domain.params import parse_params
from appliance.workers.models.reference import ReferenceTrainer
from tests.integration.test_workers import RunningJob, run_job
from tests.integration.test_workers_training import assert_same_weights, compare_weights
from tests.model_specs import ADAMW, FC, GPT, with_

ALL_GRPC = {"*": "grpc"}
ALL_SHARED = {"*": "shared-memory"}
# cs2-1 and memoryx-1 (and, on a data set, a worker) with shared memory off: the CS-2s take
# their weights from swarmx-0 one each way, and SwarmX reaches one MemoryX each way.
MIXED = {"*": "shared-memory", "cs2-1": "grpc", "memoryx-1": "grpc"}


def data_plane_lines(job: RunningJob) -> dict[str, str]:
    """What each replica said about the transport to its peers."""
    said = {}
    for log in job.log_dir.glob("*.log"):
        found = re.findall(r"data plane: (.*)", log.read_text())
        assert len(found) == 1, f"{log.name} does not say its data plane once"
        said[log.stem] = found[0]
    return said


def peers_by_transport(line: str) -> dict[str, set[str]]:
    """{"shared memory": {...}, "grpc": {...}} from a replica's data-plane line."""
    found: dict[str, set[str]] = {"shared memory": set(), "grpc": set()}
    for part in line.split("; "):
        kind, _, names = part.partition(": ")
        found["grpc" if kind.startswith("grpc") else kind] = set(names.split(", "))
    return found


async def run_to_end(
    tmp_path: Path, num_csx: int, params: dict[str, Any], data_plane: dict[str, str]
) -> RunningJob:
    async with run_job(
        tmp_path, num_csx, 2, 1, 12, params, model_dir=tmp_path / "model", data_plane=data_plane
    ) as job:
        assert await job.exit_code("chief-0", within=120) == 0, job.logs()
        for name in job.processes:
            assert await job.exit_code(name, within=10) == 0, f"{name}\n{job.logs()}"
    return job


@pytest.mark.parametrize("params", [with_(FC, optimizer=ADAMW), GPT], ids=["fc_mnist", "gpt2"])
async def test_two_cs2_give_the_same_bits_over_grpc_shared_memory_and_a_mix(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    runs = {}
    for name, data_plane in (("grpc", ALL_GRPC), ("shared", ALL_SHARED), ("mixed", MIXED)):
        runs[name] = await run_to_end(tmp_path / name, 2, params, data_plane)

    everyone = set(runs["grpc"].processes) - {"chief-0"}  # no one calls the chief
    for replica, line in data_plane_lines(runs["grpc"]).items():
        assert peers_by_transport(line) == {
            "shared memory": set(),
            "grpc": everyone - {replica},
        }, line
        assert "(shared memory off)" in line
    for replica, line in data_plane_lines(runs["shared"]).items():
        assert peers_by_transport(line)["shared memory"] == everyone - {replica}, line
    off = {"cs2-1", "memoryx-1"}
    for replica, line in data_plane_lines(runs["mixed"]).items():
        seen = peers_by_transport(line)
        if replica in off:  # it calls everyone over gRPC
            assert seen["shared memory"] == set(), line
        else:  # it shares memory with everyone but those two, whom it reaches over gRPC
            assert seen["shared memory"] == everyone - off - {replica}, line
            assert seen["grpc"] == off, line

    assert_same_weights(tmp_path / "grpc" / "model", tmp_path / "shared" / "model")
    assert_same_weights(tmp_path / "grpc" / "model", tmp_path / "mixed" / "model")


async def test_one_cs2_is_bit_for_bit_the_reference_over_grpc_and_shared_memory(
    tmp_path: Path,
) -> None:
    params = with_(FC, optimizer=ADAMW)
    reference = ReferenceTrainer(parse_params(params), 12)
    reference.train()
    for name, data_plane in (("grpc", ALL_GRPC), ("shared", ALL_SHARED)):
        await run_to_end(tmp_path / name, 1, params, data_plane)
        compare_weights(tmp_path / name / "model" / "weights.npz", reference, exact=True)
