"""An input worker's pod: the worker program, its role's requests, and the shared data sets
mounted read-only into it alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from appliance.backends.kubernetes import manifests as m
from appliance.composition.backends import kube_backend
from appliance.config import Settings
from appliance.domain.job import Replica
from appliance.domain.plan import Role

JOB = "wsjob-abcdefghijklmn"
TEMPLATE = m.PodTemplate(
    "ml", "appliance:dev", "IfNotPresent", "appliance.ml.svc:50051", 5.0, 60.0,
    data_sets="/datasets",
)  # fmt: skip
WORKER = Replica(JOB, "worker-3", Role.WORKER, 3, "worker-01")


def container_and_volumes(replica: Replica, template: m.PodTemplate) -> tuple[Any, Any]:
    spec = m.replica_pod(JOB, replica, template, owner_uid="uid-1", attempt=2)["spec"]
    (container,) = spec["containers"]
    return container, {v["name"]: v for v in spec["volumes"]}


def test_an_input_worker_pod_runs_the_worker_program_as_every_replica_does() -> None:
    c, _ = container_and_volumes(WORKER, TEMPLATE)

    assert c["command"][:4] == ["python", "-m", "appliance.workers", "worker"]
    assert c["command"][c["command"].index("--replica") + 1] == "worker-3"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["APPLIANCE_JOB_ID"], env["APPLIANCE_REPLICA"]) == (JOB, "worker-3")
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}


def test_the_data_sets_are_mounted_read_only_at_their_own_path_into_input_workers_only() -> None:
    c, volumes = container_and_volumes(WORKER, TEMPLATE)

    mounts = {v["name"]: v for v in c["volumeMounts"]}
    assert mounts["data-sets"] == {"name": "data-sets", "mountPath": "/datasets", "readOnly": True}
    assert volumes["data-sets"]["hostPath"] == {"path": "/datasets", "type": "Directory"}
    for role in (Role.CHIEF, Role.CS2, Role.MEMORYX, Role.SWARMX):
        other, theirs = container_and_volumes(Replica(JOB, f"{role}-0", role, 0, "n"), TEMPLATE)
        assert "data-sets" not in theirs
        assert "/datasets" not in {v["mountPath"] for v in other["volumeMounts"]}


def test_from_a_claim_read_only_and_none_when_no_data_sets_are_configured() -> None:
    claimed = dataclasses.replace(TEMPLATE, data_sets_claim="datasets-ro")
    _, volumes = container_and_volumes(WORKER, claimed)
    assert volumes["data-sets"]["persistentVolumeClaim"] == {
        "claimName": "datasets-ro",
        "readOnly": True,
    }
    c, volumes = container_and_volumes(WORKER, dataclasses.replace(TEMPLATE, data_sets=""))
    assert "data-sets" not in volumes and len(c["volumeMounts"]) == 2


def test_the_settings_give_the_data_sets_and_the_workers_requests(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        kube_data_sets_path="/datasets",
        kube_data_sets_claim="datasets-ro",
        kube_replica_resources={"worker": {"cpu": "2", "memory": "1Gi"}},  # type: ignore[arg-type]
    )
    backend = kube_backend(settings, SimpleNamespace(namespace="ml"))  # type: ignore[arg-type]

    template = backend.template
    assert (template.data_sets, template.data_sets_claim) == ("/datasets", "datasets-ro")
    assert template.requests_of(Role.WORKER) == {"cpu": "2", "memory": "1Gi"}
