"""The settings read flat from APPLIANCE_* and taken in groups; the backends by name."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from appliance.composition import BACKENDS, election
from appliance.config import SchedulerSettings, Settings
from appliance.config.settings import BackendName

POSTGRES = "postgresql://appliance@127.0.0.1/appliance"


def test_every_backend_the_settings_accept_is_in_the_registry() -> None:
    assert set(BACKENDS) == set(typing.get_args(BackendName))


def test_the_same_environment_names_fill_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_SCHEDULER_INTERVAL", "0.5")
    monkeypatch.setenv("APPLIANCE_KUBE_PENDING_TIMEOUT_SECONDS", "42")
    monkeypatch.setenv("APPLIANCE_LEASE_DURATION_SECONDS", "10")
    monkeypatch.setenv("APPLIANCE_SIM_FAIL_AT", "cs2-0@5")
    settings = Settings(data_dir=Path("/srv/appliance"))
    assert settings.scheduler == dataclasses.replace(SchedulerSettings(), interval=0.5)
    assert settings.kube.pending_timeout_seconds == 42
    assert settings.leases.timing.duration == 10
    assert [(f.replica, f.step) for f in settings.sim.failures] == [("cs2-0", 5)]
    assert settings.model_dirs.root == Path("/srv/appliance/model_dirs")
    assert settings.auth.replica_key_file == Path("/srv/appliance/replica-token.key")
    assert settings.store.url == "sqlite:////srv/appliance/appliance.db"


def test_the_groups_defaults_are_the_settings_defaults() -> None:
    settings = Settings()
    for group in ("scheduler", "preemption", "restarts", "replicas", "sim", "leases", "kube"):
        assert getattr(settings, group) == type(getattr(settings, group))(), group


@pytest.mark.parametrize(
    ("backend", "url", "chosen"),
    [
        ("kubernetes", "", "off"),  # SQLite: one coordinator
        ("kubernetes", POSTGRES, "kubernetes"),  # a Lease beside the pods
        ("local", POSTGRES, "database"),
        ("sim", POSTGRES, "database"),
    ],
)
def test_auto_election_follows_the_store_and_where_the_backend_keeps_its_lease(
    backend: str, url: str, chosen: str
) -> None:
    settings = Settings(backend=backend, database_url=url)  # type: ignore[arg-type]
    assert election(settings) == chosen
    assert election(settings.model_copy(update={"leader_election": "database"})) == "database"
