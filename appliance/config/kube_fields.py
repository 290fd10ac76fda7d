"""The settings of the Kubernetes backend (APPLIANCE_KUBE_*), a part of Settings (settings.py)
kept here so that each file stays one room; taken by the backend as `settings.kube`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from appliance.config.groups import KubeSettings
from appliance.config.kube import MEMORY_QUANTITY, ReplicaResources


class KubeFields(BaseSettings):
    """APPLIANCE_KUBE_*: read as fields of Settings (whose model_config sets the prefix)."""

    kube_namespace: str = Field(
        default=KubeSettings.namespace,
        description="Namespace of the job pods; empty means the pod's own namespace in-cluster, "
        "else the kubeconfig context's namespace, else `default`.",
    )
    kube_config: Path | None = Field(
        default=KubeSettings.config,
        description="kubeconfig file; unset means in-cluster config, else ~/.kube/config.",
    )
    kube_image: str = Field(
        default=KubeSettings.image, description="Image of the replica pods (the appliance image)."
    )
    kube_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default=KubeSettings.image_pull_policy, description="imagePullPolicy of the replica pods."
    )
    kube_clean_pod_policy: Literal["all", "keep-failed"] = Field(
        default=KubeSettings.clean_pod_policy,
        description="What to delete when a job ends: every object, or all but failed jobs' pods "
        "(kept for debugging until the job's ConfigMap is deleted).",
    )
    kube_pending_timeout_seconds: float = Field(
        default=KubeSettings.pending_timeout_seconds,
        gt=0,
        description="A replica pod waiting this long (e.g. ImagePullBackOff) fails its job.",
    )
    kube_request_timeout_seconds: float = Field(
        default=KubeSettings.request_timeout_seconds,
        gt=0,
        description="Timeout of one Kubernetes API call.",
    )
    kube_model_dirs_claim: str = Field(
        default=KubeSettings.model_dirs_claim,
        description="PersistentVolumeClaim (ReadWriteMany) mounted at the model dirs root in "
        "every replica pod, so checkpoints outlive the pods; empty = an emptyDir per pod.",
    )
    kube_data_sets_path: str = Field(
        default=KubeSettings.data_sets,
        pattern=r"^$|^/[^\x00]{0,4095}$",
        description="Where the shared data sets live (an absolute path): mounted read-only at "
        "this same path into the input workers' pods only, from kube_data_sets_claim, else the "
        "node's directory (hostPath); also readable by every user (add it to data_dirs_allowed)."
        " Empty: none mounted.",
    )
    kube_data_sets_claim: str = Field(
        default=KubeSettings.data_sets_claim,
        description="PersistentVolumeClaim holding the shared data sets (ReadOnlyMany or "
        "ReadWriteMany); empty = a hostPath volume of kube_data_sets_path.",
    )
    kube_replica_memory_limit: str = Field(
        default=KubeSettings.replica_memory_limit,
        pattern=MEMORY_QUANTITY,
        description="Memory limit of every replica pod's container (a Kubernetes quantity).",
    )
    kube_replica_resources: ReplicaResources = Field(
        default=ReplicaResources(),
        description="JSON of the replica pods' requests by role, e.g. "
        '{"cs2": {"cpu": "250m", "memory": "512Mi"}}; a job is scheduled only when the nodes '
        "have them free, and the coordinator warns at start when its largest job cannot fit.",
    )
    kube_watch_timeout_seconds: int = Field(
        default=KubeSettings.watch_timeout_seconds,
        ge=1,
        description="The pod watch is renewed from its last resourceVersion this often.",
    )
