"""A user who installs the package the Python way (`pip install .`, or a wheel built from it) gets
the same product as `make install`: the wheel carries the dashboard's templates and browser
assets, and the coordinator run from it serves them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
VENDOR = REPO / "appliance/server/web/static/vendor"


def build_wheel(tmp_path: Path) -> Path:
    """The project wheel, built from the files git tracks (a clean clone's), not the work tree."""
    source = tmp_path / "source"
    source.mkdir()
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "pyproject.toml", "README.md", "appliance", "csctl"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, tracked):
        target = source / name.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((REPO / name.decode()).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--wheel-dir", tmp_path / "wheels", source],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "wheels").glob("wafer_appliance-*.whl")
    return wheel


def test_the_wheel_serves_the_dashboard_and_docs_assets(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as unpacked:
        names = set(unpacked.namelist())
        unpacked.extractall(site)
    vendored = sorted(path.name for path in VENDOR.iterdir())
    assert {"htmx.min.js", "swagger-ui-bundle.js", "uPlot.iife.min.js"} <= set(vendored)
    for name in vendored:
        assert f"appliance/server/web/static/vendor/{name}" in names
    assert "appliance/server/web/templates/base.html" in names

    # The coordinator imported from the unpacked wheel, not from this checkout.
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from appliance.cli import main; main()", "serve",
         "--data-dir", tmp_path / "data", "--grpc-port", "0", "--http-port", "0"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"appliance \S+ \(gRPC\), (https?://\S+) \(HTTP\)", first)
        assert match, f"unexpected first line: {first!r}"
        base = match.group(1)
        for name in ("htmx.min.js", "swagger-ui-bundle.js", "uPlot.iife.min.js"):
            got = httpx.get(f"{base}/ui/static/vendor/{name}", timeout=30)
            assert got.status_code == 200, name
            assert got.content == (VENDOR / name).read_bytes()
        assert "swagger-ui-bundle.js" in httpx.get(f"{base}/docs", timeout=30).text
        where = subprocess.run(
            [sys.executable, "-c", "import appliance; print(appliance.__file__)"],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert where.startswith(str(site)), where
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
