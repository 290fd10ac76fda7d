"""A job's params text, checked: bounded, parsed as YAML, sections known, every value typed
(domain/params.py), once per distinct text among the last kept ones."""

from __future__ import annotations

import copy
import functools
from typing import Any

from appliance.domain.arrays import as_a_task
from appliance.domain.bounded_yaml import load_bounded
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import Params, parse_params

MAX_PARAMS_BYTES = 1 << 20
PARAMS_SECTIONS = frozenset({"model", "train_input", "eval_input", "optimizer", "runconfig"})


def validate_params(params_yaml: str) -> dict[str, Any]:
    """The params file must be a YAML mapping of Model Zoo sections with a `model` section.
    An array's params may say `${array_task_id}` where a number goes: they are checked with an
    index there, and returned as given (each task's are checked with its own index,
    domain/array_specs.py)."""
    return checked_params(params_yaml)[0]


# Submits repeat the same params text (a team's model, an array's tasks, jobs resubmitted):
# each of the last PARAMS_KEPT texts is parsed and checked once (~0.3 ms, a tenth of a
# submit's CPU); each caller gets its own copy of the mapping. Longer texts are checked every
# time: a few KiB of YAML can parse to a few hundred KiB of objects (a list of short strings),
# so at most ~64 x 0.2 MB is kept. (The coordinator checks texts under 2 KiB itself; longer
# ones go to the checker processes of services/offload.py, each with its own copy of this.)
PARAMS_KEPT = 64
PARAMS_KEPT_CHARS = 4 << 10


def checked_params(params_yaml: str) -> tuple[dict[str, Any], Params | None]:
    """`validate_params`, with the params typed as it checked them (None when they name an
    array task's index: what was checked then is a task's, not theirs)."""
    if len(params_yaml) > PARAMS_KEPT_CHARS:
        return _checked_params(params_yaml)
    params, typed = _kept_params(params_yaml)  # a refusal is raised, never kept
    return copy.deepcopy(params), typed  # typed: frozen models, shared


@functools.lru_cache(maxsize=PARAMS_KEPT)
def _kept_params(params_yaml: str) -> tuple[dict[str, Any], Params | None]:
    return _checked_params(params_yaml)


def _checked_params(params_yaml: str) -> tuple[dict[str, Any], Params | None]:
    if not params_yaml.strip():
        raise InvalidSpec("params is empty; pass a params YAML file", field="params")
    try:
        encoded = params_yaml.encode()
    except UnicodeEncodeError:  # a lone surrogate, as a JSON \udcff escape can carry
        raise InvalidSpec("params is not valid Unicode text", field="params") from None
    if len(encoded) > MAX_PARAMS_BYTES:
        raise InvalidSpec(
            f"params is larger than {MAX_PARAMS_BYTES} bytes; keep data out of the params file",
            field="params",
        )
    params = load_bounded(params_yaml, "params")
    if not isinstance(params, dict):
        raise InvalidSpec("params must be a YAML mapping of sections", field="params")
    unknown = sorted(str(k) for k in params if k not in PARAMS_SECTIONS)
    if unknown:
        allowed = ", ".join(sorted(PARAMS_SECTIONS))
        raise InvalidSpec(
            f"params has unknown section(s) {', '.join(unknown)}; allowed: {allowed}",
            field="params",
        )
    for section, value in params.items():
        if value is not None and not isinstance(value, dict):
            raise InvalidSpec(f"params section {section!r} must be a mapping", field="params")
    if not params.get("model"):
        raise InvalidSpec("params needs a non-empty `model` section", field="params")
    task = as_a_task(params, params_yaml)
    typed = parse_params(task)  # keys and values of every section
    return params, typed if task is params else None
