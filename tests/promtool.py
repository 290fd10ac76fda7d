"""promtool for tests, found by deploy/tools/promtool.sh (on PATH, Debian's, or built from the
pinned Prometheus Go module) and cached outside the repository. Where none can be had the tests
that need it skip, saying why; with APPLIANCE_REQUIRE_PROMTOOL=1 (CI) they fail instead."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / "tools" / "promtool.sh"
REQUIRE_ENV = "APPLIANCE_REQUIRE_PROMTOOL"


def find_promtool() -> Path:
    """The binary; skips (or fails, when required) if it cannot be built here."""
    done = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        why = f"deploy/tools/promtool.sh failed, so no promtool: {done.stderr.strip()}"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}", pytrace=False)
        pytest.skip(why)
    return Path(done.stdout.strip().splitlines()[-1])


def promtool(binary: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], input=stdin, capture_output=True, text=True, timeout=60
    )
