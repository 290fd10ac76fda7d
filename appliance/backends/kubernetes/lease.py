"""The election lease as a coordination.k8s.io/v1 Lease (a LeaseLock, domain/leadership.py).

holderIdentity is the holder, leaseTransitions the epoch, leaseDurationSeconds the duration
(whole seconds, rounded up); metadata.resourceVersion is the compare-and-set version, so a
replace of a Lease someone else wrote meanwhile is refused (409). renewTime and acquireTime
are written for people and `kubectl get lease`; the elector never reads them.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from appliance.backends.kubernetes.client import KubeApi
from appliance.domain.leadership import LeaseRecord


class KubeLeaseLock:
    def __init__(self, api: KubeApi, name: str) -> None:
        self.api = api
        self.name = name
        self._read: dict[str, Any] = {}  # the Lease as last read (its acquireTime is kept)

    @property
    def description(self) -> str:
        return f"Lease {self.api.namespace}/{self.name}"

    async def read(self) -> LeaseRecord | None:
        lease = await self.api.get("Lease", self.name)
        self._read = lease or {}
        return _record(lease)

    async def create(self, record: LeaseRecord) -> LeaseRecord | None:
        return _record(await self.api.create_new("Lease", self._manifest(record, "", True)))

    async def update(self, record: LeaseRecord, version: str) -> LeaseRecord | None:
        read = _record(self._read or None)
        renewal = read is not None and read.version == version and read.epoch == record.epoch
        manifest = self._manifest(record, version, acquired=not renewal)
        if renewal:  # keeps when its holder acquired it
            manifest["spec"]["acquireTime"] = self._read["spec"].get("acquireTime")
        return _record(await self.api.replace("Lease", manifest))

    def _manifest(self, record: LeaseRecord, version: str, acquired: bool) -> dict[str, Any]:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.api.namespace}
        if version:
            metadata["resourceVersion"] = version
        spec: dict[str, Any] = {
            "holderIdentity": record.holder or None,
            "leaseDurationSeconds": math.ceil(record.duration),
            "leaseTransitions": record.epoch,
            "renewTime": now,
        }
        if acquired:
            spec["acquireTime"] = now
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }


def _record(lease: dict[str, Any] | None) -> LeaseRecord | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        epoch=int(spec.get("leaseTransitions") or 0),
        duration=float(spec.get("leaseDurationSeconds") or 0),
        version=str(lease["metadata"].get("resourceVersion", "")),
    )
