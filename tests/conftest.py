"""Generic fixtures shared by the whole suite. Keep area-specific fixtures next to their tests."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.server.pki import CA_CERT, CertificateAuthority
from tests import fuzz_report, timing
from tests.postgres import REQUIRE_ENV, PostgresServer, PostgresUnavailable, postgres_server

_skipped_postgres: list[str] = []


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (see tests/postgres.py); skips without one."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(postgres_server())
        except PostgresUnavailable as exc:
            if os.environ.get(REQUIRE_ENV) == "1":
                pytest.fail(f"{REQUIRE_ENV}=1 but: {exc}", pytrace=False)
            _skipped_postgres.append(str(exc))
            pytest.skip(str(exc))
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a SQLite file in tmp_path, or a fresh database on the server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'appliance.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    with server.fresh_database() as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every coordinator of the session serves TLS with a certificate from one CA (as the
    coordinators of one cluster share theirs), and every client (csctl, the Python client,
    httpx) verifies with it; a test of TLS itself sets its own. Session-wide, so that the
    module-wide coordinators some tiers share see it too."""
    directory = tmp_path_factory.mktemp("tls-ca")
    CertificateAuthority.load_or_create(directory)
    with pytest.MonkeyPatch.context() as patch:
        for name in ("CSCTL_INSECURE", "APPLIANCE_INSECURE"):
            patch.delenv(name, raising=False)
        patch.setenv("APPLIANCE_TLS_CA_DIR", str(directory))
        patch.setenv("CSCTL_CA", str(directory / CA_CERT))
        for trust in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # httpx, requests
            patch.setenv(trust, str(directory / CA_CERT))
        yield directory


@pytest.fixture(autouse=True)
def no_user_csctl_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the machine's csctl settings (its token, its config file) out of every test: the
    client takes a token from them when it is given none."""
    empty = tmp_path_factory.mktemp("csctl") / "config.yaml"
    empty.write_text("")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("CSCTL_TOKEN", "CSCTL_SERVER"):
            patch.delenv(name, raising=False)
        patch.setenv("CSCTL_CONFIG", str(empty))
        yield


@pytest.fixture
def dead_address() -> Iterator[str]:
    """An address where nothing listens: the port is held by a socket that never listens."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in fuzz_report.LINES:
        terminalreporter.write_line(line)
    if _skipped_postgres:
        terminalreporter.write_line(f"PostgreSQL tests skipped: {_skipped_postgres[0]}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test is marked with its tier (`pytest -m unit`, see tests/timing.py), and its
    timeout is its tier's budget, or the one it asks for (`@pytest.mark.timeout(N)`), stretched
    by APPLIANCE_TEST_SLOWDOWN."""
    for item in items:
        tier = timing.tier_of(item.path)
        if tier:
            item.add_marker(getattr(pytest.mark, tier))
        asked = item.get_closest_marker("timeout")
        seconds = asked.args[0] if asked and asked.args else timing.budget_of(item.path)
        item.add_marker(pytest.mark.timeout(seconds * timing.SLOWDOWN), append=False)
