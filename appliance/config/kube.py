"""What the replica pods request, by role, as the settings accept it (APPLIANCE_KUBE_REPLICA_
RESOURCES, the Helm chart's replicaResources): Kubernetes quantities, bounded."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Kubernetes quantities as the settings accept them (a bounded number of digits).
CPU_QUANTITY = r"^([0-9]{1,7}m|[0-9]{1,4}(\.[0-9]{1,3})?)$"
MEMORY_QUANTITY = r"^[0-9]{1,12}(\.[0-9]{1,3})?(Ki|Mi|Gi|Ti|k|M|G|T)?$"


class RoleResources(BaseModel):
    """What one replica pod of a role requests; an unset key keeps the backend's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str | None = Field(
        default=None, pattern=CPU_QUANTITY, description="CPU request, e.g. 250m or 1.5."
    )
    memory: str | None = Field(
        default=None, pattern=MEMORY_QUANTITY, description="Memory request, e.g. 512Mi."
    )

    @field_validator("cpu", mode="before")
    @classmethod
    def _cores_as_text(cls, value: object) -> object:
        """`--set replicaResources.cs2.cpu=1` arrives as a number: cores, as Kubernetes reads
        it (then checked against the pattern like any other)."""
        if isinstance(value, bool):
            return value  # refused by the str type, not taken for 1 core
        if isinstance(value, int | float):
            return f"{value:.3f}".rstrip("0").rstrip(".")
        return value


class ReplicaResources(BaseModel):
    """Requests of the replica pods, by role (the Kubernetes backend's defaults where unset:
    chief 100m/256Mi, cs2 500m/512Mi, memoryx 250m/512Mi, swarmx 250m/256Mi, worker
    100m/256Mi)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chief: RoleResources = RoleResources()
    cs2: RoleResources = RoleResources()
    memoryx: RoleResources = RoleResources()
    swarmx: RoleResources = RoleResources()
    worker: RoleResources = RoleResources()  # an input worker (reads the job's data set)
