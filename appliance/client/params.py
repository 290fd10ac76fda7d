"""Turn what a user passes as `params` (a file path or a mapping) into checked params YAML."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import validate_params

ParamsSource = str | os.PathLike[str] | Mapping[str, Any]
"""A path to a Model Zoo style params YAML file, or the params themselves as a mapping."""


def load_params_yaml(params: ParamsSource) -> str:
    """Return the params as YAML text, read on the user node, or raise InvalidSpec("params")."""
    if isinstance(params, Mapping):
        try:
            text = yaml.safe_dump(dict(params), sort_keys=False)
        except yaml.YAMLError as exc:
            raise InvalidSpec(
                f"params mapping cannot be written as YAML: {exc}", field="params"
            ) from None
        source = "params"
    else:
        path = Path(params).expanduser()
        text = _read_params_file(path)
        source = f"params file {path}"
    try:
        validate_params(text)
    except InvalidSpec as exc:
        if source == "params":
            raise
        detail = exc.message.removeprefix("params ")
        raise InvalidSpec(f"{source}: {detail}", field="params") from None
    return text


def _read_params_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problem = "does not exist"
    except IsADirectoryError:
        problem = "is a directory, not a YAML file"
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    raise InvalidSpec(
        f"params file {path} {problem}; pass the path of a params YAML file", field="params"
    )
