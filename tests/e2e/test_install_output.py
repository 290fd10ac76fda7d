"""`make install`, as a newcomer's first command: its pip step prints nothing when all is well
(no deprecation of pyproject's licence table, no note on every editable install)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_editable_install_of_make_install_prints_nothing() -> None:
    recipe = subprocess.run(
        ["make", "-n", "-B", "install", f"BIN={Path(sys.executable).parent}"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (install,) = [line for line in recipe.splitlines() if "pip install -q -e" in line]
    # The same command, without the dependencies (installed already): the package's own build.
    install = install.replace("'.[dev]'", ". --no-deps")
    done = subprocess.run(
        ["bash", "-c", install], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""
