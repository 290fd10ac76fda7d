"""Compile (validate-only) mode: a report of what a job would stream, nothing reserved."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.compile import MAX_LISTED_UNITS
from appliance.domain.errors import InvalidSpec
from appliance.domain.plan import Role
from tests.integration.coordinator.harness import RunningCoordinator

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_compile_reports_layers_bytes_and_replicas_without_a_job(
    client: ApplianceClient, params_file: Path
) -> None:
    report = client.compile(params_file, num_csx=2)
    assert report.model == "fc_mnist" and len(report.units) == 3  # 784-256-256-10
    assert report.units[0].tensors == (("weight", (784, 256)), ("bias", (256,)))
    parameters = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert sum(u.parameters for u in report.units) == parameters
    assert report.parameter_bytes == 4 * parameters
    counts = {g.role: g.count for g in report.plan.groups}
    assert counts == {Role.CHIEF: 1, Role.CS2: 2, Role.MEMORYX: 1, Role.SWARMX: 1}
    weights = report.parameter_bytes
    # Two broadcasts a step (forward, then backward in reverse), gradients up once.
    assert report.bytes_swarmx_to_cs2 == 2 * report.bytes_cs2_to_swarmx == 2 * 2 * weights
    assert report.bytes_per_step == 2 * weights * (1 + 2) + weights * (2 + 1)  # 1 SwarmX
    assert report.wafer_bytes == 40 * 10**9
    assert report.wafer_pipelined.optimizer_state == weights  # sgd: one copy
    assert report.wafer_streaming.weights == (784 * 256 + 256 + 256 * 256 + 256) * 4
    assert client.list_jobs(all=True) == []  # nothing was created
    assert all(n.used == 0 for n in client.nodes())  # nothing was reserved


def test_compile_rejects_what_submit_would_reject(
    client: ApplianceClient, params_file: Path
) -> None:
    with pytest.raises(InvalidSpec, match="more than the 4 CS-2 systems"):
        client.compile(params_file, num_csx=5)
    with pytest.raises(InvalidSpec, match="unknown key"):
        client.compile({"model": {"name": "fc_mnist", "hiden_sizes": [4]}}, num_csx=1)
    with pytest.raises(InvalidSpec, match="mode compile does not run a job"):
        client.submit(params_file, num_csx=1, num_steps=1, mode="compile")


def test_launcher_compile_mode_prints_the_report(coordinator: RunningCoordinator) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "appliance.run", "--params", str(EXAMPLES / "params_gpt2.yaml"),
         "--num_csx", "4", "--mode", "compile", "--server", coordinator.address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("model gpt2: ")
    assert "replicas: chief x1, cs2 x4" in result.stdout
    assert "bytes per step:" in result.stdout
    for mode in ("pipelined", "weight streaming"):
        assert re.search(
            rf"\nwafer \({mode}\): 0\.0 GB of 40\.0 GB - fits \(weights ", result.stdout
        )


def test_a_very_deep_model_reports_its_first_layers_and_counts_them_all(
    client: ApplianceClient,
) -> None:
    params = {"model": {"name": "fc_mnist", "hidden_sizes": [2] * 1500}}
    report = client.compile(params, num_csx=1)
    assert (report.unit_count, len(report.units)) == (1501, MAX_LISTED_UNITS)
    parameters = 784 * 2 + 2 + 1499 * (2 * 2 + 2) + 2 * 10 + 10
    assert report.parameter_bytes == 4 * parameters  # every layer counted, not only listed


def test_launcher_compile_mode_counts_the_parameters(
    coordinator: RunningCoordinator, params_file: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "appliance.run", "--params", str(params_file),
         "--num_csx", "1", "--mode", "compile", "--server", coordinator.address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    parameters = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert f"parameters 269.3 K ({parameters:,}): 1.03 MiB; MemoryX holds" in result.stdout
