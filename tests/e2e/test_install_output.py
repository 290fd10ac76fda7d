"""`make install`, as a newcomer's first command: its pip step prints nothing when all is well
(no deprecation of pyproject's licence table, no note on every editable install)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def recipe(target: str) -> list[str]:
    """The commands `make TARGET` runs from scratch (make -n -B), against this venv."""
    return subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target, f"BIN={Path(sys.executable).parent}"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip


def test_the_editable_installs_of_make_install_print_nothing() -> None:
    installs = [line for line in recipe("install") if "pip install -q -e" in line]
    assert len(installs) == 2, installs  # the appliance, then the test and lint tools
    for install in installs:
        # The same command, without the dependencies (installed already): the package's build.
        command = install.replace("'.[dev]'", ".").replace("-e .", "-e . --no-deps")
        done = subprocess.run(
            ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout + done.stderr == ""


def test_make_demo_installs_only_what_running_needs() -> None:
    """The first run is the appliance alone: no mypy, ruff, selenium, grpcio-tools (a 756 MB
    venv with them), no npm."""
    commands = recipe("demo")
    assert any("pip install -q -e ." in line for line in commands), commands
    assert not any("[dev]" in line or "npm" in line or "build.sh" in line for line in commands)
    assert commands[-1].split()[-2:] == [f"{Path(sys.executable).parent}/appliance", "demo"]


def test_make_demo_takes_ports() -> None:
    ported = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo", "GRPC_PORT=50052", "HTTP_PORT=0",
         f"BIN={Path(sys.executable).parent}"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert ported[-1].endswith("appliance demo --grpc-port 50052 --http-port 0")
