"""Replicas as pods through the Kubernetes API (the `kubernetes` client: in client.py only)."""

from appliance.backends.kubernetes.backend import KubernetesBackend
from appliance.backends.kubernetes.client import (
    KubeApi,
    KubeConfigError,
    KubeError,
    KubeUnavailable,
)
from appliance.backends.kubernetes.manifests import ROLE_REQUESTS, PodTemplate, Resources

__all__ = [
    "ROLE_REQUESTS",
    "KubeApi",
    "KubeConfigError",
    "KubeError",
    "KubeUnavailable",
    "KubernetesBackend",
    "PodTemplate",
    "Resources",
]
