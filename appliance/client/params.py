"""Turn what a user passes as `params` (a file path or a mapping) into checked params YAML."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from appliance.domain.arrays import as_a_task
from appliance.domain.bounded_yaml import load_bounded
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import parse_params
from appliance.domain.params_keys import notes_of, runconfig_value
from appliance.domain.spec import MAX_PARAMS_BYTES, validate_params

ParamsSource = str | os.PathLike[str] | Mapping[str, Any]
"""A path to a Model Zoo style params YAML file, or the params themselves as a mapping."""


@dataclasses.dataclass(frozen=True)
class Submission:
    """What a submit sends, settled on the user node: the params as YAML text, the steps and
    the model dir (the arguments, or else the params' runconfig.max_steps and
    runconfig.model_dir, as the Model Zoo's run.py takes them), and the params' warnings."""

    params_yaml: str
    num_steps: int
    model_dir: str
    warnings: tuple[str, ...]


def prepare_submission(
    params: ParamsSource, num_steps: int | None, model_dir: str | os.PathLike[str]
) -> Submission:
    """Read and check the params; raises InvalidSpec naming the field."""
    text = load_params_yaml(params)
    parsed = validate_params(text)
    runconfig = parse_params(as_a_task(parsed, text)).runconfig
    if num_steps is None:
        num_steps = runconfig.max_steps
        if num_steps is None:
            raise InvalidSpec(
                "num_steps is not given and the params have no runconfig.max_steps; give one",
                field="num_steps",
            )
    if not os.fspath(model_dir):
        model_dir = runconfig.model_dir or ""
    resolved = _absolute(model_dir)
    warnings = tuple(str(note) for note in notes_of(parsed, resolved))
    return Submission(text, num_steps, resolved, warnings)


def params_warnings(params: ParamsSource) -> tuple[str, ...]:
    """One line for each params key accepted but not used by the emulation."""
    parsed = validate_params(load_params_yaml(params))
    return tuple(str(note) for note in notes_of(parsed))


def max_steps_in_file(path: str) -> int | None:
    """The runconfig.max_steps of the params file at `path`, or None (also when the file cannot
    be read or checked: submitting it says why)."""
    try:
        loaded = load_bounded(_read_params_file(Path(path).expanduser()), "params")
    except InvalidSpec:
        return None
    steps = runconfig_value(loaded, "max_steps") if isinstance(loaded, dict) else None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def _absolute(model_dir: str | os.PathLike[str]) -> str:
    """A model (or data) directory as an absolute path on this (the user) node; "" stays
    unset."""
    text = os.fspath(model_dir)
    return os.path.abspath(os.path.expanduser(text)) if text else ""


def load_params_yaml(params: ParamsSource) -> str:
    """Return the params as YAML text, read on the user node, or raise InvalidSpec("params").
    A relative `data_dir` is made absolute against the working directory (as the Model Zoo's
    run.py reads it from where it runs)."""
    if isinstance(params, Mapping):
        text = _dumped(dict(params))
        source = "params"
    else:
        path = Path(params).expanduser()
        text = _read_params_file(path)
        source = f"params file {path}"
    try:
        text = _with_absolute_data_dirs(text)
        validate_params(text)
    except InvalidSpec as exc:
        if source == "params":
            raise
        detail = exc.message.removeprefix("params ")
        raise InvalidSpec(f"{source}: {detail}", field="params") from None
    return text


def _dumped(params: dict[str, Any]) -> str:
    try:
        return yaml.safe_dump(params, sort_keys=False)
    except yaml.YAMLError as exc:
        raise InvalidSpec(
            f"params mapping cannot be written as YAML: {exc}", field="params"
        ) from None


def _with_absolute_data_dirs(text: str) -> str:
    """`text` with each input section's relative data_dir made absolute on this node."""
    loaded = load_bounded(text, "params")
    if not isinstance(loaded, dict):
        return text  # validating says what is wrong
    changed = False
    for section in ("train_input", "eval_input"):
        given = loaded.get(section)
        if not isinstance(given, dict):
            continue
        data_dir = given.get("data_dir")
        if isinstance(data_dir, str) and data_dir and not data_dir.startswith("/"):
            given["data_dir"] = _absolute(data_dir)
            changed = True
    return _dumped(loaded) if changed else text


def load_params_file(path: Path) -> Any:
    """The params file's YAML document, read and loaded bounded (a file nested thousands deep,
    or --params /dev/zero, is refused in one sentence); raises InvalidSpec("params")."""
    text = _read_params_file(path)
    try:
        return load_bounded(text, "params")
    except InvalidSpec as exc:
        detail = exc.message.removeprefix("params ")
        raise InvalidSpec(f"params file {path} {detail}", field="params") from None


def _read_params_file(path: Path) -> str:
    try:
        with path.open("rb") as file:  # at most one byte past the bound: /dev/zero ends too
            data = file.read(MAX_PARAMS_BYTES + 1)
        if len(data) > MAX_PARAMS_BYTES:
            raise InvalidSpec(
                f"params file {path} is larger than {MAX_PARAMS_BYTES} bytes; keep data out of "
                "the params file",
                field="params",
            )
        return data.decode("utf-8")
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
