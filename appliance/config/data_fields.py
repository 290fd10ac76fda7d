"""The settings of users' data sets (APPLIANCE_DATA_DIRS_ALLOWED), a part of Settings
(settings.py) kept here so that each file stays one room; taken as `settings.data_dirs`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

MAX_ALLOWED_DIRS = 64


class DataFields(BaseSettings):
    """APPLIANCE_DATA_DIRS_ALLOWED: read as a field of Settings (whose model_config sets the
    prefix)."""

    data_dirs_allowed: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated absolute directories holding shared data sets that any "
        "user's job may read (with authentication on; a user's own data sets live under "
        "<model dirs root>/users/<user>/ or groups/<group>/), e.g. /datasets/mnist,/datasets/owt.",
    )

    @field_validator("data_dirs_allowed", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """`/a,/b` as the environment gives it (a list as Python or JSON gives it)."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, Sequence) and len(value) > MAX_ALLOWED_DIRS:
            raise ValueError(f"name at most {MAX_ALLOWED_DIRS} directories")
        return value


def check_apart(name: str, allowed: Sequence[Path], root: Path, data_dir: Path) -> None:
    """Raise ValueError naming the setting when a directory open to every user is not an
    absolute directory apart from the model dirs root (everyone's own files) and the
    coordinator's data dir (its store and keys)."""
    root = root.resolve()
    for given in allowed:
        shared = given.resolve()
        if not given.is_absolute() or root.is_relative_to(shared) or shared == Path("/"):
            raise ValueError(
                f"{name}: {str(given)!r} must be an absolute directory that does not hold the "
                f"model dirs root {root}"
            )
        if shared.is_relative_to(root) or data_dir.resolve().is_relative_to(shared):
            raise ValueError(
                f"{name}: {str(given)!r} must lie apart from the model dirs root {root} and the "
                "data dir"
            )
