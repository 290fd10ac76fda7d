"""The Kubernetes objects of one wsjob, as plain manifests (pure functions, no API calls).

Per job: a ConfigMap holding the job spec, which owns everything else (deleting it lets the
garbage collector remove the job's pods, Service, Secret and NetworkPolicy); a Secret holding
the job's credentials, which the pods take as environment (a plain env value would show in the
pod spec to anyone who may `get pods`): its tokens, and each replica's certificate and key
under keys of its own, each pod taking its own only (secretKeyRef, not envFrom); a
NetworkPolicy under which the job's pods accept traffic only from each other (the chart's own
policy adds the coordinator); a headless Service for replica discovery; one Pod per replica
(restartPolicy Never) running the same worker command as the local backend.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from appliance.backends.kubernetes.quantities import memory_bytes as _bytes
from appliance.domain.arrays import array_environment
from appliance.domain.auth import ATTEMPT_ENV
from appliance.domain.job import Job, Replica
from appliance.domain.plan import Role
from appliance.domain.replica_errors import ERROR_FILE_ENV
from appliance.domain.replica_identity import REPLICA_CA_ENV, REPLICA_CERT_ENV, REPLICA_KEY_ENV

APP = "appliance"
MANAGED_BY = "appliance-coordinator"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_JOB = "appliance.io/job-id"
LABEL_ROLE = "appliance.io/role"
LABEL_INDEX = "appliance.io/replica-index"
LABEL_REPLICA = "appliance.io/replica"
LABEL_ATTEMPT = "appliance.io/attempt"
CONTAINER = "replica"
# Kubernetes' default place for a container's termination message.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
SPEC_KEY = "job.json"
# The key of the CA the replicas verify each other by, in the job's credentials Secret.
REPLICA_CA_KEY = "replica-ca.crt"

# What the coordinator's pods select on: every replica pod it made, in its namespace.
REPLICA_SELECTOR = f"{LABEL_NAME}={APP},{LABEL_MANAGED_BY}={MANAGED_BY}"


@dataclasses.dataclass(frozen=True)
class Resources:
    """A pod's requests, as Kubernetes quantities (capacity.py reads them as numbers)."""

    cpu: str
    memory: str


# Default requests per role (APPLIANCE_KUBE_REPLICA_RESOURCES changes them): an emulated CS-2
# does the arithmetic; the others relay and store. A 4-CS-2 job of the default pool asks 3.35
# CPU in all (with a data set, its 4 input workers 0.4 more).
ROLE_REQUESTS: Mapping[Role, Resources] = {
    Role.CHIEF: Resources("100m", "256Mi"),
    Role.CS2: Resources("500m", "512Mi"),
    Role.MEMORYX: Resources("250m", "512Mi"),
    Role.SWARMX: Resources("250m", "256Mi"),
    Role.WORKER: Resources("100m", "256Mi"),
}


@dataclasses.dataclass(frozen=True)
class PodTemplate:
    """What every replica pod of this coordinator shares."""

    namespace: str
    image: str
    image_pull_policy: str
    coordinator_address: str
    grace_seconds: float
    orphan_timeout: float
    # shared-memory: replicas of one job whose pods share a host and network namespace (host
    # networking) talk through shared memory; the rest over gRPC. grpc: all over gRPC.
    data_plane: str = "shared-memory"
    # Where the coordinator puts model dirs (its model dirs root): writable in every replica
    # pod, from this PersistentVolumeClaim if given (ReadWriteMany across nodes), else an
    # emptyDir (checkpoints then go with the pod).
    model_dirs: str = "/var/lib/appliance/model_dirs"
    model_dirs_claim: str = ""
    # Where the shared data sets live: mounted read-only, at this same path, into the input
    # workers' pods only (no other role reads them), from this PersistentVolumeClaim if given,
    # else from the node's own directory (hostPath). Empty: none mounted.
    data_sets: str = ""
    data_sets_claim: str = ""
    python: str = "python"
    # Memory limit of every replica container (a Kubernetes quantity).
    memory_limit: str = "4Gi"
    # What each role's pods request.
    requests: Mapping[Role, Resources] = dataclasses.field(
        default_factory=lambda: dict(ROLE_REQUESTS)
    )

    def requests_of(self, role: Role) -> dict[str, str]:
        """The container requests of a `role` replica. A limit set below a role's request
        lowers the request with it (the API server refuses a pod that requests more than its
        limit)."""
        wanted = self.requests[role]
        return {"cpu": wanted.cpu, "memory": min(wanted.memory, self.memory_limit, key=_bytes)}


def selector_of_job(job_id: str) -> str:
    return f"{REPLICA_SELECTOR},{LABEL_JOB}={job_id}"


def config_map_name(job_id: str) -> str:
    return job_id


def service_name(job_id: str) -> str:
    return job_id


def secret_name(job_id: str) -> str:
    return f"{job_id}-credentials"


def network_policy_name(job_id: str) -> str:
    return f"{job_id}-peers"


def pod_name(job_id: str, replica: str, attempt: int) -> str:
    """Each attempt's pods have their own names: a pod of a torn-down attempt still being
    deleted never stands in for (or is mistaken for) the next attempt's."""
    return f"{job_id}-a{attempt}-{replica}"


def job_labels(job_id: str) -> dict[str, str]:
    return {LABEL_NAME: APP, LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: job_id}


def config_map(job: Job, namespace: str) -> dict[str, Any]:
    spec = {
        "id": job.id,
        "user": job.user,
        "groups": list(job.groups),
        "spec": dataclasses.asdict(job.spec),
        "replicas": [{"name": r.name, "role": r.role.value, "node": r.node} for r in job.replicas],
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(job.id),
            "namespace": namespace,
            "labels": {**job_labels(job.id), LABEL_COMPONENT: "wsjob"},
        },
        "data": {SPEC_KEY: json.dumps(spec, sort_keys=True, default=str)},
    }


def owner_reference(config_map_uid: str, job_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": config_map_name(job_id),
        "uid": config_map_uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def headless_service(job_id: str, namespace: str, owner_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job_id),
            "namespace": namespace,
            "labels": {**job_labels(job_id), LABEL_COMPONENT: "discovery"},
            "ownerReferences": [owner_reference(owner_uid, job_id)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": job_labels(job_id),
            "publishNotReadyAddresses": True,
            "ports": [{"name": "grpc", "port": 50052, "protocol": "TCP"}],
        },
    }


def credentials_secret(
    job_id: str, namespace: str, owner_uid: str, env: Mapping[str, str]
) -> dict[str, Any]:
    """The job's credentials, one key per environment variable of its replicas."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(job_id),
            "namespace": namespace,
            "labels": {**job_labels(job_id), LABEL_COMPONENT: "credentials"},
            "ownerReferences": [owner_reference(owner_uid, job_id)],
        },
        "immutable": True,
        "stringData": dict(env),
    }


def secret_key(env_name: str, replica: str) -> str:
    """Where the credentials Secret holds `env_name` of `replica`: its own key for its
    certificate and key (`cs2-0.crt`, `cs2-0.key`), one for the CA, the tokens' own names."""
    return {
        REPLICA_CERT_ENV: f"{replica}.crt",
        REPLICA_KEY_ENV: f"{replica}.key",
        REPLICA_CA_ENV: REPLICA_CA_KEY,
    }.get(env_name, env_name)


def credentials_data(
    tokens: Mapping[str, str], identities: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The credentials Secret's data: the job's `tokens` (environment, one key each) and the
    `identities` of its replicas (their environment, by replica name)."""
    data = dict(tokens)
    for replica, env in identities.items():
        data.update({secret_key(name, replica): value for name, value in env.items()})
    return data


def is_credentials_secret(
    found: dict[str, Any], owner_uid: str, env: Mapping[str, str], replicas: Sequence[str] = ()
) -> bool:
    """Whether `found` (as read back) is the job's credentials Secret: owned by its ConfigMap,
    holding exactly its tokens (which only the coordinator can derive) and a certificate for
    each of `replicas` (made at an earlier launch of the attempt: as good as new ones)."""
    owners = found.get("metadata", {}).get("ownerReferences") or [{}]
    data = {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}
    tokens = {k: v for k, v in data.items() if "." not in k}  # identity keys all hold a dot
    certified = all(secret_key(REPLICA_CERT_ENV, r) in data for r in replicas)
    return owners[0].get("uid") == owner_uid and tokens == dict(env) and certified


def peers_only_policy(job_id: str, namespace: str, owner_uid: str) -> dict[str, Any]:
    """The job's pods accept connections from the job's pods (and what other policies allow:
    the chart's lets the coordinator in). A CNI that enforces NetworkPolicy makes it hold."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(job_id),
            "namespace": namespace,
            "labels": {**job_labels(job_id), LABEL_COMPONENT: "isolation"},
            "ownerReferences": [owner_reference(owner_uid, job_id)],
        },
        "spec": {
            "podSelector": {"matchLabels": job_labels(job_id)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": job_labels(job_id)}}]}],
        },
    }


def replica_pod(
    job_id: str,
    replica: Replica,
    template: PodTemplate,
    owner_uid: str,
    attempt: int,
    credentials: Sequence[str] = (),
) -> dict[str, Any]:
    """One replica as a pod: the worker command of the local backend, identity in env.
    `credentials`: the environment names the job's credentials Secret holds for it."""
    command = [
        template.python, "-m", "appliance.workers", replica.role.value,
        "--job-id", job_id, "--replica", replica.name,
        "--coordinator", template.coordinator_address,
        "--orphan-timeout", str(template.orphan_timeout),
        "--data-plane", template.data_plane,
    ]  # fmt: skip
    env = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "APPLIANCE_JOB_ID", "value": job_id},
        {"name": "APPLIANCE_REPLICA", "value": replica.name},
        {"name": "APPLIANCE_COORDINATOR", "value": template.coordinator_address},
        {"name": ATTEMPT_ENV, "value": str(attempt)},
        *({"name": k, "value": v} for k, v in array_environment(job_id).items()),
        # Replicas serve the data plane on the pod's own address and tell peers that one.
        _from_field("APPLIANCE_REPLICA_HOST", "status.podIP"),
        _from_field("APPLIANCE_POD_NAME", "metadata.name"),
        # A failing replica's last error line becomes the pod's termination message.
        {"name": ERROR_FILE_ENV, "value": TERMINATION_MESSAGE_PATH},
        # The job's tokens and this replica's own certificate: how it proves it is the job's.
        *(_from_secret(name, job_id, secret_key(name, replica.name)) for name in credentials),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job_id, replica.name, attempt),
            "namespace": template.namespace,
            "labels": {
                **job_labels(job_id),
                LABEL_COMPONENT: "replica",
                LABEL_ROLE: replica.role.value,
                LABEL_INDEX: str(replica.index),
                LABEL_REPLICA: replica.name,
                LABEL_ATTEMPT: str(attempt),
            },
            "annotations": {"appliance.io/pool-node": replica.node},
            "ownerReferences": [owner_reference(owner_uid, job_id)],
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": math.ceil(template.grace_seconds),
            "hostname": replica.name,
            "subdomain": service_name(job_id),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            # Pod Security "restricted": non-root, the runtime's seccomp profile, no privilege
            # escalation, every capability dropped (the container's context below).
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": CONTAINER,
                    "image": template.image,
                    "imagePullPolicy": template.image_pull_policy,
                    "command": command,
                    "env": list(env),
                    "resources": {
                        "requests": template.requests_of(replica.role),
                        # One job's replica cannot take the node's memory from the others.
                        "limits": {"memory": template.memory_limit},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    # Why it failed, in the pod's status: the line the worker writes there,
                    # else the log's tail (a crash before its handler); the backend keeps the
                    # last line of it (status.py).
                    "terminationMessagePath": TERMINATION_MESSAGE_PATH,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "model-dirs", "mountPath": template.model_dirs},
                        *_data_sets_mounts(replica, template),
                    ],
                }
            ],
            "volumes": [
                {"name": "tmp", "emptyDir": {}},
                _model_dirs_volume(template),
                *_data_sets_volumes(replica, template),
            ],
        },
    }


def _from_field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _from_secret(name: str, job_id: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name(job_id), "key": key}}}


def _data_sets_mounts(replica: Replica, template: PodTemplate) -> list[dict[str, Any]]:
    """The shared data sets, read-only, at the path they have on the storage: an input
    worker's only."""
    if replica.role is not Role.WORKER or not template.data_sets:
        return []
    return [{"name": "data-sets", "mountPath": template.data_sets, "readOnly": True}]


def _data_sets_volumes(replica: Replica, template: PodTemplate) -> list[dict[str, Any]]:
    if not _data_sets_mounts(replica, template):
        return []
    if template.data_sets_claim:
        claim = {"claimName": template.data_sets_claim, "readOnly": True}
        return [{"name": "data-sets", "persistentVolumeClaim": claim}]
    return [{"name": "data-sets", "hostPath": {"path": template.data_sets, "type": "Directory"}}]


def _model_dirs_volume(template: PodTemplate) -> dict[str, Any]:
    if template.model_dirs_claim:
        return {
            "name": "model-dirs",
            "persistentVolumeClaim": {"claimName": template.model_dirs_claim},
        }
    return {"name": "model-dirs", "emptyDir": {}}
