"""Every benchmark module imports: `make lint` does not type-check bench/, and a benchmark that
no longer imports is found here, not when someone next measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_module_imports() -> None:
    modules = sorted(f"bench.{p.stem}" for p in (ROOT / "bench").glob("*.py"))
    assert "bench.weight_streaming" in modules
    # In a child process: some benchmarks pin BLAS threads in os.environ when imported.
    script = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    done = subprocess.run(
        [sys.executable, "-c", script, *modules], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
