"""A coordinator with authentication on, its CS-2 systems in maintenance (so jobs wait until
a test frees one), and a real headless browser: Debian's chromium driven by selenium.

Without chromium and chromedriver the browser tests skip, unless APPLIANCE_REQUIRE_BROWSER=1
(CI) makes that a failure. Screenshots go to APPLIANCE_SCREENSHOTS, else under pytest's tmp.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    kill_workers,
    wait_until,
    worker_processes,
)
from tests.integration.rest.conftest import SMALL_PARAMS

SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]
# Run in every page before its own scripts: what the page's Content-Security-Policy blocked.
WATCH_CSP = (
    "window.__cspViolations = [];"
    "document.addEventListener('securitypolicyviolation', (e) =>"
    " window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));"
)
USERS = {"alice": (["nlp"], False), "bob": (["cv"], False), "root": ([], True)}


class Dashboard:
    """The running coordinator, its users' tokens, and a REST client per user."""

    def __init__(self, running: RunningCoordinator, tokens: dict[str, str]) -> None:
        self.running = running
        self.tokens = tokens
        self.base_url = f"https://127.0.0.1:{running.coordinator.http_port}"

    def api(self, user: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def submit(self, user: str, **fields: Any) -> str:
        body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2, **fields}
        with self.api(user) as api:
            response = api.post("/api/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def phase(self, job_id: str) -> str:
        with self.api("root") as api:
            return str(api.get(f"/api/v1/jobs/{job_id}").json()["phase"])

    def park(self) -> None:
        """Every CS-2 system in maintenance: what is submitted waits."""
        self.running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    root = tmp_path_factory.mktemp("web")
    tokens_file = root / "tokens.yaml"
    tokens = {
        user: create_token(tokens_file, user, groups, admin=admin)
        for user, (groups, admin) in USERS.items()
    }
    running = RunningCoordinator(root / "data", auth_tokens_file=tokens_file).start()
    served = Dashboard(running, tokens)
    served.park()
    address = running.address
    try:
        yield served
    finally:
        try:
            with served.api("root") as api:
                listed = api.get("/api/v1/jobs", params={"limit": 10_000}).json()["jobs"]
                for job in listed:
                    api.post(f"/api/v1/jobs/{job['id']}/cancel")
            wait_until(lambda: not worker_processes(coordinator=address), 15, "replicas to exit")
        finally:
            kill_workers(address)
            running.stop()


def _browser_binaries() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def _session_ca_spki() -> str:
    """base64 of the SHA-256 of the session CA's public key (chromium's SPKI pin)."""
    ca = x509.load_pem_x509_certificate(Path(os.environ["CSCTL_CA"]).read_bytes())
    spki = ca.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian chromium driven by selenium (failing, not skipping, in CI)."""
    found = _browser_binaries()
    if found is None:
        message = "no chromium and chromedriver (apt-get install chromium chromium-driver)"
        if os.environ.get("APPLIANCE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = found
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", "--disable-gpu", "--no-first-run"):  # fmt: skip
        options.add_argument(argument)
    # Trust the session's CA (tests/conftest.py), which every coordinator's chain ends with:
    # chromium reads its trust from an NSS database, not from SSL_CERT_FILE.
    options.add_argument(f"--ignore-certificate-errors-spki-list={_session_ca_spki()}")
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    chrome.set_page_load_timeout(30)
    chrome.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH_CSP})
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as chrome:
        yield chrome


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("APPLIANCE_SCREENSHOTS")
    where = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where
