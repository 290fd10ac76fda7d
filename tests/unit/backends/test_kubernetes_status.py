"""What a pod's status means for its replica, and what a replica's pod looks like."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from appliance.backends.kubernetes import manifests as m
from appliance.backends.kubernetes.status import PodState, view_of
from appliance.domain.job import Replica
from appliance.domain.plan import Role

JOB = "wsjob-abcdefghijklmn"


def pod(status: dict[str, Any], *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{JOB}-cs2-1",
        "labels": {m.LABEL_JOB: JOB, m.LABEL_REPLICA: "cs2-1"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    return {"metadata": meta, "status": status}


def container(state: dict[str, Any]) -> dict[str, Any]:
    return {"phase": "Running", "containerStatuses": [{"name": m.CONTAINER, "state": state}]}


@pytest.mark.parametrize(
    ("status", "state", "code", "reason"),
    [
        ({"phase": "Pending"}, PodState.WAITING, None, ""),
        (container({"running": {}}), PodState.RUNNING, None, ""),
        (container({"terminated": {"exitCode": 0, "reason": "Completed"}}), PodState.ENDED, 0,
         "Completed"),
        (container({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), PodState.ENDED, 137,
         "OOMKilled"),
        (container({"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}),
         PodState.WAITING, None, "ImagePullBackOff"),
        ({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}, PodState.ENDED,
         None, "Evicted"),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                              "reason": "Unschedulable"}]},
         PodState.WAITING, None, "Unschedulable"),
    ],
)  # fmt: skip
def test_pod_status_maps_to_replica_state(
    status: dict[str, Any], state: PodState, code: int | None, reason: str
) -> None:
    view = view_of(pod(status))
    assert view is not None
    assert (view.state, view.exit_code, view.reason) == (state, code, reason)
    assert (view.job_id, view.replica) == (JOB, "cs2-1")


def test_an_evicted_pod_was_lost_and_a_pod_says_its_attempt() -> None:
    """Lost (retryable) is a pod that ended without its container ending; a container that
    exited says so with its code instead."""
    evicted = pod({"phase": "Failed", "reason": "Evicted"})
    evicted["metadata"]["labels"][m.LABEL_ATTEMPT] = "3"
    view = view_of(evicted)
    assert view is not None and (view.lost, view.attempt) == (True, 3)
    exited = view_of(pod(container({"terminated": {"exitCode": 1, "reason": "Error"}})))
    assert exited is not None and (exited.lost, exited.attempt) == (False, 0)
    junk = pod({"phase": "Running"})
    junk["metadata"]["labels"][m.LABEL_ATTEMPT] = "9" * 40
    assert view_of(junk).attempt == 0  # type: ignore[union-attr]


def test_only_unschedulable_image_and_config_errors_are_stuck() -> None:
    pulling = view_of(pod(container({"waiting": {"reason": "ErrImagePull"}})))
    creating = view_of(pod(container({"waiting": {"reason": "ContainerCreating"}})))
    assert pulling is not None and pulling.stuck
    assert creating is not None and not creating.stuck
    assert pulling.describe() == "ErrImagePull"
    # kube-scheduler's condition on a pod no node can hold (as a 2-CPU node said it).
    message = (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod."
    )
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": message}  # fmt: skip
    pending = view_of(pod({"phase": "Pending", "conditions": [condition]}))
    assert pending is not None and pending.stuck
    assert pending.message == "0/1 nodes are available: 1 Insufficient cpu"


def test_pod_without_our_labels_is_ignored() -> None:
    assert view_of({"metadata": {"name": "other", "labels": {}}, "status": {}}) is None


def test_replica_pod_runs_the_worker_command_with_identity_and_owner() -> None:
    template = m.PodTemplate(
        namespace="ml",
        image="appliance:dev",
        image_pull_policy="IfNotPresent",
        coordinator_address="appliance.ml.svc:50051",
        grace_seconds=4.5,
        orphan_timeout=60.0,
    )
    replica = Replica(JOB, "cs2-1", Role.CS2, 1, "cs2-02")
    held = ["APPLIANCE_DATAPLANE_TOKEN"]
    manifest = m.replica_pod(
        JOB, replica, template, owner_uid="uid-1", attempt=1, credentials=held
    )
    labels = manifest["metadata"]["labels"]
    assert labels[m.LABEL_NAME] == "appliance" and labels[m.LABEL_JOB] == JOB
    assert (labels[m.LABEL_ROLE], labels[m.LABEL_INDEX], labels[m.LABEL_REPLICA]) == (
        "cs2", "1", "cs2-1",
    )  # fmt: skip
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    spec = manifest["spec"]
    assert spec["restartPolicy"] == "Never" and spec["terminationGracePeriodSeconds"] == 5
    (c,) = spec["containers"]
    assert c["command"][:4] == ["python", "-m", "appliance.workers", "cs2"]
    assert c["command"][c["command"].index("--coordinator") + 1] == "appliance.ml.svc:50051"
    env = {e["name"]: e for e in c["env"]}
    assert env["APPLIANCE_REPLICA"]["value"] == "cs2-1"
    assert env["APPLIANCE_REPLICA_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # The job's tokens come from its Secret: nothing secret is in the pod spec.
    assert not any("value" in env[name] for name in env if "TOKEN" in name)
    assert env["APPLIANCE_DATAPLANE_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": f"{JOB}-credentials", "key": "APPLIANCE_DATAPLANE_TOKEN"}
    }
    assert "envFrom" not in c
    secret = m.credentials_secret(JOB, "ml", "uid-1", {"APPLIANCE_DATAPLANE_TOKEN": "t0k"})
    assert secret["metadata"]["name"] == f"{JOB}-credentials"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert secret["stringData"] == {"APPLIANCE_DATAPLANE_TOKEN": "t0k"}
    assert c["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # Pod Security "restricted" (the kube tests' namespace enforces it) and a memory limit.
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["limits"] == {"memory": "4Gi"}
    small = dataclasses.replace(template, memory_limit="256Mi")
    (tight,) = m.replica_pod(JOB, replica, small, "uid-1", 1)["spec"]["containers"]
    assert tight["resources"]["requests"]["memory"] == "256Mi"  # never above the limit
    assert tight["resources"]["limits"] == {"memory": "256Mi"}
    # Requests per role come from the settings (APPLIANCE_KUBE_REPLICA_RESOURCES).
    sized = dataclasses.replace(
        template, requests={**template.requests, Role.CS2: m.Resources("50m", "300Mi")}
    )
    (light,) = m.replica_pod(JOB, replica, sized, "uid-1", 1)["spec"]["containers"]
    assert light["resources"]["requests"] == {"cpu": "50m", "memory": "300Mi"}
    # The model dirs are writable on the read-only root: an emptyDir unless a claim is given.
    mounts = {v["mountPath"]: v["name"] for v in c["volumeMounts"]}
    assert mounts["/var/lib/appliance/model_dirs"] == "model-dirs"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["model-dirs"]
    shared = dataclasses.replace(template, model_dirs_claim="ckpts")
    (claimed,) = [
        v for v in m.replica_pod(JOB, replica, shared, "uid-1", 1)["spec"]["volumes"]
        if v["name"] == "model-dirs"
    ]  # fmt: skip
    assert claimed["persistentVolumeClaim"] == {"claimName": "ckpts"}
    # The coordinator selects only what it made, never the chart's own pods.
    assert m.selector_of_job(JOB).startswith(m.REPLICA_SELECTOR)


def test_a_failed_container_says_why_in_the_last_line_of_its_termination_message() -> None:
    """The worker writes its last error line where the pod's termination message is read
    from; Kubernetes falls back to the log's tail when it could not (a crash before its
    handler). Only the last line is kept, escaped; of a container killed by a signal, none."""
    failed = {"exitCode": 1, "reason": "Error",
              "message": "Traceback ...\nUnsafePath: /proc/mymodel \x1b[2J\n"}  # fmt: skip
    view = view_of(pod(container({"terminated": failed})))
    assert view is not None
    assert view.last_error == "UnsafePath: /proc/mymodel \\x1b[2J"
    assert view.describe() == ""  # a plain "Error": the exit code says it
    oom = {"exitCode": 137, "reason": "OOMKilled", "message": "step 5 loss 2.1\n"}
    killed = view_of(pod(container({"terminated": oom})))
    assert killed is not None and (killed.last_error, killed.describe()) == ("", "OOMKilled")


def test_a_replica_pod_hands_its_termination_message_to_the_worker() -> None:
    template = m.PodTemplate(
        namespace="ml", image="appliance:dev", image_pull_policy="IfNotPresent",
        coordinator_address="appliance.ml.svc:50051", grace_seconds=4.5, orphan_timeout=60.0,
    )  # fmt: skip
    replica = Replica(JOB, "chief-0", Role.CHIEF, 0, "")
    (c,) = m.replica_pod(JOB, replica, template, "uid-1", 1)["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["APPLIANCE_ERROR_FILE"] == c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
