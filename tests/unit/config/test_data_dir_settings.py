"""APPLIANCE_DATA_DIRS_ALLOWED: comma-separated absolute directories apart from everyone's own
files and the coordinator's keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance.config.settings import Settings


def test_comma_separated_shared_data_set_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_DATA_DIRS_ALLOWED", "/datasets/mnist, /datasets/owt,")

    settings = Settings(data_dir=tmp_path / "data")

    assert settings.data_dirs.allowed == (Path("/datasets/mnist"), Path("/datasets/owt"))
    assert Settings(data_dir=tmp_path).data_dirs.allowed == (
        Path("/datasets/mnist"),
        Path("/datasets/owt"),
    )


def test_none_by_default(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).data_dirs.allowed == ()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("/", "must be an absolute directory"),
        ("datasets", "must be an absolute directory"),
        ("{data}", "must be an absolute directory"),  # holds the model dirs root and the keys
        ("{data}/model_dirs/users/bob", "must lie apart"),  # one user's own
    ],
)
def test_a_directory_that_would_open_someones_own_files_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv("APPLIANCE_DATA_DIRS_ALLOWED", value.format(data=tmp_path / "data"))

    with pytest.raises(ValidationError, match=f"data_dirs_allowed: .* {says}"):
        Settings(data_dir=tmp_path / "data")
