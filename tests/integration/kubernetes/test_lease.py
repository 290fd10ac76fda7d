"""The election lease as a Kubernetes Lease keeps the LeaseLock contract, on a real API server
and with the token of the chart's ServiceAccount (so the chart's Role allows it)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from appliance.backends.kubernetes import KubeApi
from appliance.backends.kubernetes.lease import KubeLeaseLock
from appliance.domain.leadership import LeaseLock
from tests.integration.lease_contract import LeaseLockContract
from tests.kube.cluster import NAMESPACE


class TestKubeLeaseLock(LeaseLockContract):
    @pytest.fixture
    async def api(self, role_kubeconfig: Path) -> AsyncIterator[KubeApi]:
        api = await KubeApi.connect(
            kubeconfig=role_kubeconfig, namespace=NAMESPACE, request_timeout=5.0
        )
        yield api
        await api.close()

    @pytest.fixture
    def handle(self, api: KubeApi) -> Callable[[], LeaseLock]:
        name = f"leader-{uuid.uuid4().hex[:8]}"  # a lease of its own per test
        return lambda: KubeLeaseLock(api, name)
