"""An array's tasks as job specs: each task's params with its sweep overrides and its index
(domain/arrays.py), checked as any submitted params are, a refusal naming the swept key."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import yaml

from appliance.domain.arrays import (
    TASK_ID_PLACEHOLDER,
    ArrayTask,
    array_tasks,
    parse_sweep,
    task_params,
)
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import parse_params
from appliance.domain.params_keys import notes_of
from appliance.domain.spec import PARAMS_SECTIONS, JobSpec


def is_array(spec: JobSpec) -> bool:
    """Whether submitting `spec` makes an array of tasks."""
    return bool(spec.array or spec.sweep)


def task_count(spec: JobSpec) -> int:
    """How many tasks submitting `spec` makes (1: a job of no array)."""
    return len(array_tasks(spec.array, spec.sweep)[0]) if is_array(spec) else 1


def task_specs(spec: JobSpec) -> tuple[int, list[tuple[ArrayTask, JobSpec]]]:
    """The array's cap (0: none) and each task with its spec: params overridden and the index
    substituted, no array or sweep of its own, a model dir of its own (the given one's
    `${array_task_id}` replaced, else `<model_dir>/<index>`; none given: the appliance places
    each). InvalidSpec naming `sweep` (and the key) for an override the params refuse."""
    tasks, cap = array_tasks(spec.array, spec.sweep)
    if spec.sweep:
        _check_overrides(spec.params, spec.sweep)
    out = []
    for task in tasks:
        params = task_params(spec.params, task)
        if task.overrides or _mentions_index(spec.params):
            _checked(params, "")
        task_spec = dataclasses.replace(
            spec,
            params_yaml=yaml.safe_dump(params, sort_keys=False),
            array="",
            sweep={},
            model_dir=_model_dir(spec.model_dir, task.index),
        )
        task_spec.__dict__["params"] = params
        out.append((task, task_spec))
    return cap, out


def _model_dir(model_dir: str, index: int) -> str:
    if not model_dir:
        return ""
    if TASK_ID_PLACEHOLDER in model_dir:
        return model_dir.replace(TASK_ID_PLACEHOLDER, str(index))
    return f"{model_dir.rstrip('/')}/{index}"


def _mentions_index(params: Mapping[str, Any]) -> bool:
    return TASK_ID_PLACEHOLDER in yaml.safe_dump(dict(params))


def _check_overrides(params: Mapping[str, Any], sweep: Mapping[str, str]) -> None:
    """Each swept value alone on the submitted params: the first refused names its key."""
    for key, values in parse_sweep(sweep):
        section = key.split(".", 1)[0]
        if section not in PARAMS_SECTIONS:
            allowed = ", ".join(sorted(PARAMS_SECTIONS))
            raise InvalidSpec(
                f"sweep: {key}: {section} is not a params section; allowed: {allowed}",
                field="sweep",
            )
        for value in values:
            _checked(task_params(params, ArrayTask(0, {key: value})), key, value)


def _checked(params: dict[str, Any], key: str, value: str = "") -> None:
    try:
        parse_params(params)
    except InvalidSpec as exc:
        said = f"sweep: {key}={value[:64]}: " if key else "array: "
        raise InvalidSpec(said + exc.message, field="sweep" if key else "array") from None
    if key and any(note.key == key for note in notes_of(params)):
        raise InvalidSpec(
            f"sweep: {key} is not a params key this model uses; sweep one it does",
            field="sweep",
        )
