"""What "exactly the same run" means in the resume tests, and csctl run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def history(model_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.jsonl by step (a resumed run logs the steps after its checkpoint again), without
    what differs between two runs of the same numbers: the speed, the job that wrote a line and
    the most weight bytes held at once (whether the next unit arrived before the one computed on
    was dropped is a matter of timing)."""
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    unlike = {"samples_per_second", "job", "peak_weight_bytes"}
    return {r["step"]: {k: v for k, v in r.items() if k not in unlike} for r in records}


def arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def assert_same_run(mine: Path, theirs: Path, steps: int) -> None:
    """The final checkpoint (weights and optimizer state) bit for bit, and every logged
    metric, of two model dirs."""
    final = f"checkpoint_{steps}.npz"
    ours, reference = arrays(mine / final), arrays(theirs / final)
    assert ours.keys() == reference.keys()
    for key in ours:
        assert np.array_equal(ours[key], reference[key]), key
    assert history(mine) == history(theirs)


def csctl(address: str, *args: str) -> str:
    """csctl's output; fails the test on a non-zero exit, with its stderr."""
    done = run_csctl(address, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_csctl(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """csctl run as a user runs it, against `address`: its exit code and output."""
    return subprocess.run(
        [Path(sys.executable).parent / "csctl", "--server", address, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
