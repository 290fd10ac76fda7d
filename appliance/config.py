"""The one settings object, read once at start-up (APPLIANCE_ environment prefix)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from appliance.domain.inventory import Node, default_pool

DEFAULT_GRPC_PORT = 50051
DEFAULT_HTTP_PORT = 8080


class Settings(BaseSettings):
    """Coordinator settings. Every field can be set as APPLIANCE_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="APPLIANCE_", frozen=True)

    data_dir: Path = Field(
        default=Path(".appliance"),
        description="Where the SQLite store, replica logs and default model dirs live.",
    )
    database_url: str = Field(
        default="",
        description="Any SQLAlchemy URL (postgresql://...); empty means SQLite in data_dir.",
    )
    host: str = Field(default="127.0.0.1", description="Address the servers listen on.")
    grpc_port: int = Field(default=DEFAULT_GRPC_PORT, ge=0, le=65535, description="0 = free port")
    http_port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535, description="0 = free port")
    systems: int = Field(default=4, ge=1, le=4096, description="Number of CS-2 systems.")
    memoryx_nodes: int = Field(default=4, ge=1, le=4096, description="Number of MemoryX nodes.")
    swarmx_nodes: int = Field(default=2, ge=1, le=4096, description="Number of SwarmX nodes.")
    memoryx_bytes: int = Field(default=16 << 30, gt=0, description="Memory per MemoryX node.")
    swarmx_ports: int = Field(default=4, ge=1, description="CS-2 ports per SwarmX node (fan-out).")
    scheduler_interval: float = Field(
        default=2.0, gt=0, description="Seconds between scheduler passes when nothing wakes it."
    )
    cancel_grace_seconds: float = Field(
        default=5.0, ge=0, description="SIGTERM to SIGKILL grace when replicas are stopped."
    )
    init_timeout_seconds: float = Field(
        default=120.0, gt=0, description="A job not RUNNING this long after SCHEDULED fails."
    )
    worker_orphan_timeout: float = Field(
        default=60.0, gt=0, description="Replicas exit when the coordinator is gone this long."
    )
    log_tail_lines: int = Field(default=20, ge=1, le=1000)
    auth_tokens_file: Path | None = Field(
        default=None,
        description="YAML file of hashed tokens (`appliance token create`); unset = auth off.",
    )

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'appliance.db').resolve()}"

    def pool(self) -> list[Node]:
        return default_pool(
            systems=self.systems,
            memoryx=self.memoryx_nodes,
            swarmx=self.swarmx_nodes,
            memoryx_bytes=self.memoryx_bytes,
            swarmx_ports=self.swarmx_ports,
        )
