"""Fixtures of the deploy tests: helm (fetched, isolated) and the chart rendered once."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.deploy.chart import REQUIRE_ENV, VALUES, Helm, Rendered
from tests.kube.cluster import CannotRun
from tests.kube.helm import fetch_helm, helm_env


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        bin_dir = fetch_helm()
    except CannotRun as e:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {e}", pytrace=False)
        pytest.skip(str(e))
    home = tmp_path_factory.mktemp("helm-home")
    (home / "kubeconfig").write_text("")
    return Helm(bin_dir / "helm", helm_env(home, home / "kubeconfig"))


@pytest.fixture(scope="session")
def rendered(helm: Helm) -> dict[str, Rendered]:
    out = {}
    for name, args in VALUES.items():
        text = helm.template(*args)
        out[name] = Rendered(text, [o for o in yaml.safe_load_all(text) if o])
    return out


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith("APPLIANCE_"):
            monkeypatch.delenv(key)
    return monkeypatch
