"""The coordinator's settings: read flat from the APPLIANCE_* environment (settings.py), taken
in frozen groups by the components (groups.py); the Kubernetes resource requests (kube.py) and
the inventory file (inventory.py) they may name."""

from appliance.config.groups import (
    AuthSettings,
    KubeSettings,
    LeaseSettings,
    ModelDirSettings,
    PoolSettings,
    PreemptionSettings,
    ReplicaSettings,
    RestartSettings,
    SchedulerSettings,
    ServerSettings,
    SimSettings,
    StoreSettings,
    TimeLimitSettings,
)
from appliance.config.inventory import pool_of
from appliance.config.settings import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, Settings

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "AuthSettings",
    "KubeSettings",
    "LeaseSettings",
    "ModelDirSettings",
    "PoolSettings",
    "PreemptionSettings",
    "ReplicaSettings",
    "RestartSettings",
    "SchedulerSettings",
    "ServerSettings",
    "Settings",
    "SimSettings",
    "StoreSettings",
    "TimeLimitSettings",
    "pool_of",
]
