"""The one module that talks to the Kubernetes API (the official client's asyncio flavour).

Every call has a timeout and retries on a backoff ladder when the API server is overloaded
(429, honouring Retry-After), failing (5xx) or unreachable; after the ladder it raises
KubeUnavailable, which callers show as a condition, never as a crash. Objects cross this
module as plain dicts (the JSON the API speaks), so nothing else imports `kubernetes`.
The ladder is a loop of its own (`_call`): with tenacity, honouring Retry-After takes a
custom wait and an exception to carry the header, which is no shorter than the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from appliance.backends.base import BackendUnavailable
from appliance.backends.kubernetes.manifests import CONTAINER

log = logging.getLogger(__name__)

BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 4.0)  # seconds; then KubeUnavailable
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# Where each kind lives: its API group's path and its plural.
_PLURAL = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Secret": ("/api/v1", "secrets"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases"),
}
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeError(Exception):
    """The API server refused a request (4xx other than 429, or a 5xx after retries)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class KubeConfigError(ValueError):
    """No usable configuration to reach the API server; the message says which and why."""


class KubeUnavailable(BackendUnavailable):
    """The API server could not be reached (or kept failing) through the whole retry ladder."""


class WatchExpired(Exception):
    """410 Gone: the resourceVersion the watch resumed from is too old; list again."""


class KubeApi:
    """Typed-enough access to the few calls the backend makes, with timeouts and retries."""

    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        request_timeout: float,
        backoff: tuple[float, ...] = BACKOFF,
    ) -> None:
        self._api = api
        self.backoff = backoff
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.last_error = ""  # empty while the last call succeeded

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: Path | None,
        namespace: str,
        request_timeout: float,
        backoff: tuple[float, ...] = BACKOFF,
    ) -> KubeApi:
        """Configure from a kubeconfig file, else in-cluster, else ~/.kube/config."""
        configuration = k8s.Configuration()
        configuration.retries = None  # our own ladder below; the client's would stack on it
        try:
            if kubeconfig is not None:
                await k8s_config.load_kube_config(
                    config_file=str(kubeconfig), client_configuration=configuration
                )
            elif _in_cluster():
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                await k8s_config.load_kube_config(client_configuration=configuration)
        except (k8s_config.ConfigException, OSError, ValueError) as e:
            where = kubeconfig or "the in-cluster service account or ~/.kube/config"
            raise KubeConfigError(
                f"cannot configure the Kubernetes client from {where}: {e}; set "
                "APPLIANCE_KUBE_CONFIG to a kubeconfig file"
            ) from None
        if not namespace:
            namespace = _default_namespace(kubeconfig)
        configuration.connection_pool_maxsize = 64
        return cls(k8s.ApiClient(configuration), namespace, request_timeout, backoff)

    async def close(self) -> None:
        await self._api.close()

    def _path(self, kind: str, name: str = "", sub: str = "", namespace: str = "") -> str:
        group, plural = _PLURAL[kind]
        path = f"{group}/namespaces/{namespace or self.namespace}/{plural}"
        return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    # ---- calls --------------------------------------------------------------------------------

    async def create(self, kind: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a namespaced object; an object that already exists is read and returned."""
        try:
            return await self._json("POST", self._path(kind), body=manifest)
        except KubeError as e:
            if e.status != 409:
                raise
        return await self._json("GET", self._path(kind, manifest["metadata"]["name"]))

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """One namespaced object, or None if there is none."""
        try:
            return await self._json("GET", self._path(kind, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def create_new(self, kind: str, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """Create a namespaced object; None if one of that name exists already."""
        try:
            return await self._json("POST", self._path(kind), body=manifest)
        except KubeError as e:
            if e.status == 409:
                return None
            raise

    async def replace(self, kind: str, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """Replace an object if its metadata.resourceVersion is still the stored one (PUT);
        None on a conflict (it changed meanwhile) or when it is gone."""
        try:
            return await self._json(
                "PUT", self._path(kind, manifest["metadata"]["name"]), body=manifest
            )
        except KubeError as e:
            if e.status in (404, 409):
                return None
            raise

    async def delete(self, kind: str, name: str, grace_seconds: int | None = None) -> bool:
        """Delete one object (dependents in the background); False when it was already gone."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            await self._json("DELETE", self._path(kind, name), body=body)
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def delete_collection(self, kind: str, selector: str, grace_seconds: int) -> None:
        """Delete every object of a kind matching the selector, in one call."""
        await self._json(
            "DELETE",
            self._path(kind),
            query={"labelSelector": selector},
            body={"gracePeriodSeconds": grace_seconds, "propagationPolicy": "Background"},
        )

    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every node of the cluster (cluster-scoped: the chart's rbac.readNodes lets the
        coordinator list them; a 403 KubeError otherwise)."""
        items, _ = await self._pages("/api/v1/nodes", {})
        return items

    async def _pages(self, path: str, query: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        query = {**query, "limit": 500}
        while True:
            page = await self._json("GET", path, query=query)
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str(page["metadata"]["resourceVersion"])
            query = {**query, "continue": token}

    async def list(
        self, kind: str, selector: str, namespace: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object matching the selector, and the resourceVersion to watch from."""
        path = self._path(kind, namespace=namespace)
        return await self._pages(path, {"labelSelector": selector})

    async def watch(
        self, kind: str, selector: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(type, object) events after resource_version until the server ends the watch.

        BOOKMARK events carry only the new resourceVersion. Raises WatchExpired on 410 Gone.
        """
        query = {
            "labelSelector": selector,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        try:
            response = await self._call(
                "GET",
                self._path(kind),
                query=query,
                read_timeout=timeout_seconds + self.request_timeout,
            )
        except KubeError as e:  # some servers answer an expired version with a plain 410
            if e.status == 410:
                raise WatchExpired(e.message) from None
            raise
        try:
            async for line in response.response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind_of_event, obj = event.get("type"), event.get("object") or {}
                if kind_of_event == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(obj.get("message", "resource version too old"))
                    raise KubeError(
                        int(obj.get("code") or 500), obj.get("reason", ""), obj.get("message", "")
                    )
                yield kind_of_event, obj
        finally:
            response.response.release()

    async def pod_log(
        self, name: str, *, tail_lines: int | None = None, limit_bytes: int | None = None
    ) -> str:
        """A replica pod's log through the API (the kubelet serves it; the API proxies)."""
        query: dict[str, Any] = {"container": CONTAINER}
        if tail_lines is not None:
            query["tailLines"] = tail_lines
        if limit_bytes is not None:
            query["limitBytes"] = limit_bytes
        response = await self._call("GET", self._path("Pod", name, "log"), query=query)
        return bytes(await response.read()).decode(errors="replace")

    # ---- transport ----------------------------------------------------------------------------

    async def _json(
        self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None
    ) -> dict[str, Any]:
        response = await self._call(method, path, query=query, body=body)
        return dict(json.loads(await response.read()))

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        read_timeout: float | None = None,
    ) -> Any:
        """One API call: timeout, the backoff ladder; returns the client's RESTResponse."""
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        for attempt, pause in enumerate((*self.backoff, None)):
            try:
                request = await self._api.param_serialize(
                    method,
                    path,
                    query_params=list((query or {}).items()),
                    header_params=dict(headers),
                    body=body,
                    auth_settings=["BearerToken"],
                )
                response = await self._api.call_api(
                    *request, _request_timeout=read_timeout or self.request_timeout
                )
                if response.status < 400:
                    self._healthy()
                    return response
                text = bytes(await response.read()).decode(errors="replace")
                if response.status not in RETRIED_STATUSES:
                    self._healthy()  # the server answered: it is up, it just said no
                    raise _kube_error(response.status, text)
                wait = _retry_after(response.headers) or pause
                self._failing(f"API server answered {response.status} to {method} {path}")
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                wait = pause
                self._failing(f"API server unreachable: {type(e).__name__}: {e}"[:300])
            if wait is None:
                break
            log.warning(
                "kubernetes %s %s failed (attempt %d): %s; retrying in %.1f s",
                method, path, attempt + 1, self.last_error, wait,
            )  # fmt: skip
            await asyncio.sleep(wait)
        raise KubeUnavailable(self.last_error)

    def _healthy(self) -> None:
        self.last_error = ""

    def _failing(self, error: str) -> None:
        self.last_error = error


def _kube_error(status: int, text: str) -> KubeError:
    """The API's Status object as a KubeError (reason and message from its body)."""
    try:
        body = json.loads(text)
        return KubeError(status, str(body.get("reason") or ""), str(body.get("message") or ""))
    except (TypeError, ValueError, AttributeError):
        return KubeError(status, "", text[:300])


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return min(float(value), 30.0) if value is not None else None
    except ValueError:
        return None


def _in_cluster() -> bool:
    return IN_CLUSTER_NAMESPACE.exists()


def _default_namespace(kubeconfig: Path | None) -> str:
    if _in_cluster():
        return IN_CLUSTER_NAMESPACE.read_text().strip()
    try:
        _, context = k8s_config.list_kube_config_contexts(
            config_file=str(kubeconfig) if kubeconfig else None
        )
        return str((context.get("context") or {}).get("namespace") or "default")
    except Exception:  # no usable kubeconfig context: the conventional default
        return "default"
