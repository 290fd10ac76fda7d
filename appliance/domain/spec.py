"""What a user asks for: the job spec and its validation (every rule names its field)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import PurePosixPath
from typing import Any

import yaml

from appliance.domain.arrays import MAX_ARRAY_CHARS, TASK_ID_PLACEHOLDER, array_tasks
from appliance.domain.bounded_yaml import check_nesting, load_bounded
from appliance.domain.dependencies import Dependency, parse_dependencies
from appliance.domain.display import hidden_character
from appliance.domain.elastic import checked_csx_min
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import MAX_STEPS as MAX_STEPS  # re-exported: the doors bound it
from appliance.domain.params import Params, parse_params
from appliance.domain.params_check import MAX_PARAMS_BYTES as MAX_PARAMS_BYTES  # re-exported
from appliance.domain.params_check import PARAMS_SECTIONS as PARAMS_SECTIONS
from appliance.domain.params_check import checked_params as checked_params
from appliance.domain.params_check import validate_params as validate_params
from appliance.domain.queues import DEFAULT_QUEUE, validate_queue_name
from appliance.domain.spec_fields import Storage, about
from appliance.domain.time_limits import (
    FORMATS,
    MAX_TIME_LIMIT_CHARS,
    format_time_limit,
    parse_time_limit,
)


class Mode(enum.StrEnum):
    TRAIN = "train"
    EVAL = "eval"
    TRAIN_AND_EVAL = "train_and_eval"
    COMPILE = "compile"


class Priority(enum.IntEnum):
    """Lower value runs first. P0 is admin-only; P2 is the default."""

    P0 = 0
    P1 = 1
    P2 = 2
    P3 = 3

    @classmethod
    def parse(cls, text: str) -> Priority:
        """p0..p3 (any case); InvalidSpec naming `priority` for anything else, of any type."""
        try:
            return cls[text.strip().upper()]
        except (KeyError, AttributeError):
            shown = repr(text)[:32]
            raise InvalidSpec(
                f"priority {shown} is not one of p0, p1, p2, p3", field="priority"
            ) from None


MAX_LABELS = 64
MAX_MODEL_DIR = 4096
MAX_RESTARTS = 100
MAX_USER = 253
MAX_COMMENT = 256
# The simulated backend's step time for one job (backends/sim), in seconds; checked at submit
# whatever the backend, so a job moved to a simulated appliance never fails on it later.
SIM_STEP_SECONDS_LABEL = "appliance.io/sim-step-seconds"
MAX_SIM_STEP_SECONDS = 3600.0

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_NAME_RE = re.compile(rf"^{_LABEL_NAME}$")
_DNS_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_USER_RE = re.compile(r"^[A-Za-z0-9_][-A-Za-z0-9_.@]*$")
COLUMN = Storage.COLUMN


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A validated request to run a wsjob. Build it with `validate_spec`.

    Each field is described once, here (domain/spec_fields.py): its document, its protobuf
    field (of the same name), the REST bodies, where the store keeps it and the launcher's
    option are derived from it. ARCHITECTURE.md's checklist says how to add one."""

    params_yaml: str = field(
        metadata=about("The params as submitted (empty in list views).", storage=COLUMN)
    )
    num_csx: int = field(
        metadata=about("How many CS-2 systems to run on (an elastic job's most: num_csx_min).")
    )
    num_steps: int = field(metadata=about("Training steps to run."))
    mode: Mode = field(default=Mode.TRAIN, metadata=about("What to run."))
    labels: Mapping[str, str] = field(
        default_factory=dict,
        # A column: changed in place (update_labels), and rows of job_labels for filtering.
        metadata=about('Kubernetes-style labels, e.g. {"team": "nlp"}.', storage=COLUMN),
    )
    priority: Priority = field(
        default=Priority.P2, metadata=about("Queue priority.", storage=COLUMN)
    )
    model_dir: str = field(
        default="",
        metadata=about("Where checkpoints and summaries go; empty = under the data dir."),
    )
    # How many times the job may be restarted after a retryable failure (None: the cluster's
    # default, APPLIANCE_RESTART_MAX_RESTARTS).
    max_restarts: int | None = field(
        default=None,
        metadata=about(
            "Restarts allowed after a retryable failure; null = the cluster's default."
        ),
    )
    # False: never preempted by a job of higher priority (only admins may say so).
    preemptible: bool = field(
        default=True,
        metadata=about("false: never preempted by a job of higher priority (admins only)."),
    )
    # The queue it is submitted to (domain/queues.py), and the jobs it waits for.
    queue: str = field(
        default=DEFAULT_QUEUE,
        metadata=about("The queue it is submitted to; empty = default.", storage=COLUMN),
    )
    depends_on: tuple[Dependency, ...] = field(
        default=(),
        metadata=about(
            'Jobs it waits for: "wsjob-…" (afterok: it succeeded), or "afterok:…", '
            '"afterany:…" (it ended), "afternotok:…" (it failed, was cancelled or timed out).',
            storage=Storage.ELSEWHERE,  # rows of job_dependencies
        ),
    )
    comment: str = field(
        default="",
        metadata=about(
            "Free text about the job (Slurm's --comment): one line, at most 256 characters.",
            option="--comment",
            max_chars=MAX_COMMENT,
        ),
    )
    array: str = field(
        default="",
        metadata=about(
            "Submit an array of tasks, each a job wsjob-…_<index> (Slurm's --array): indices "
            "as 0-31, 1,3,7 or 0-15:4, and %N: at most N tasks run at once (with sweep: %N "
            "alone). ${array_task_id} in a params value becomes the task's index.",
            option="--array",
            max_chars=MAX_ARRAY_CHARS,
        ),
    )
    sweep: Mapping[str, str] = field(
        default_factory=dict,
        metadata=about(
            "Submit the grid of these params overrides as an array, one task per point: "
            '{"optimizer.learning_rate": "1e-3,3e-3", "train_input.batch_size": "64,128"}.'
        ),
    )
    # Elastic (domain/elastic.py): it runs on as many systems as are free between this and
    # num_csx, and may shrink and grow across requeues; the global batch stays the same.
    num_csx_min: int = field(
        default=0,
        metadata=about(
            "Elastic: the fewest CS-2 systems it may run on, num_csx the most (csctl and the "
            "launcher: --num_csx 2-8); 0 = exactly num_csx. Weight streaming only."
        ),
    )
    # Submitted held (Slurm's sbatch -H): the job's hold itself is the store's (domain/holds.py).
    hold: bool = field(
        default=False,
        metadata=about(
            "Submit it held (Slurm's sbatch -H): it keeps its place in the queue and "
            "waits until released (csctl release job).",
            option="--hold",
        ),
    )
    # How long it may run (Slurm's --time, domain/time_limits.py), as D-HH:MM:SS; empty: its
    # queue's default (none: unlimited). Only time RUNNING counts, summed over attempts.
    time_limit: str = field(
        default="",
        metadata=about(
            f"How long it may run ({FORMATS}, as Slurm's --time; time queued or preempted "
            "does not count); empty = its queue's default.",
            option="--time",
            max_chars=MAX_TIME_LIMIT_CHARS,
        ),
    )

    @functools.cached_property
    def params(self) -> dict[str, Any]:
        """The parsed params (parsed once per spec object)."""
        loaded = load_bounded(self.params_yaml, "params")
        assert isinstance(loaded, dict)
        return loaded

    @functools.cached_property
    def typed_params(self) -> Params:
        """The params checked and typed (once per spec object; a submit's is seeded by
        `validate_spec`, which checked them)."""
        return parse_params(self.params)

    @functools.cached_property
    def time_limit_seconds(self) -> int | None:
        """The time limit in seconds (None: none); parsed once per spec object."""
        return parse_time_limit(self.time_limit) if self.time_limit else None


def validate_spec(
    *,
    params_yaml: str | Mapping[str, Any],
    num_csx: int,
    num_steps: int,
    mode: str | Mode = Mode.TRAIN,
    labels: Mapping[str, str] | None = None,
    priority: Priority = Priority.P2,
    model_dir: str = "",
    max_restarts: int | None = None,
    preemptible: bool = True,
    queue: str | None = None,
    depends_on: Iterable[Any] | None = None,
    comment: str = "",
    array: str = "",
    sweep: Mapping[str, str] | None = None,
    hold: bool = False,
    time_limit: str = "",
    num_csx_min: int = 0,
) -> JobSpec:
    """Check every field and return a JobSpec, or raise InvalidSpec naming the first bad field.

    `params_yaml` is YAML text, or the mapping itself (a JSON door's object), written out as
    YAML here: writing 1 MB of it takes seconds, which is the checker's work, not a door's."""
    if not isinstance(params_yaml, str):
        check_nesting(params_yaml, "params")  # before writing it out, which recurses
        params_yaml = yaml.safe_dump(dict(params_yaml), sort_keys=False) if params_yaml else ""
    if isinstance(num_csx, bool) or not isinstance(num_csx, int) or num_csx <= 0:
        raise InvalidSpec(f"num_csx must be a positive integer, got {num_csx}", field="num_csx")
    num_csx_min = checked_csx_min(num_csx_min, num_csx)
    if isinstance(num_steps, bool) or not isinstance(num_steps, int):
        raise InvalidSpec(f"num_steps must be an integer, got {num_steps!r}", field="num_steps")
    if not 0 < num_steps <= MAX_STEPS:
        raise InvalidSpec(
            f"num_steps must be between 1 and {MAX_STEPS}, got {num_steps}", field="num_steps"
        )
    parsed_mode = parse_mode(mode)
    params, typed = checked_params(params_yaml)
    if not (array or sweep) and TASK_ID_PLACEHOLDER in params_yaml:
        raise InvalidSpec(
            f"params: {TASK_ID_PLACEHOLDER} is an array task's index; submit an array "
            "(array or sweep) to use it",
            field="params",
        )
    clean_labels = validate_labels(labels or {})
    sim_step_seconds(clean_labels)
    if len(model_dir) > MAX_MODEL_DIR or hidden_character(model_dir) is not None:
        raise InvalidSpec(
            f"model_dir must be a path of at most {MAX_MODEL_DIR} characters, on one line "
            "(no control or invisible characters)",
            field="model_dir",
        )
    if model_dir and not PurePosixPath(model_dir).is_absolute():
        raise InvalidSpec(
            f"model_dir {model_dir!r} must be an absolute path (replicas do not run in your "
            "working directory); the Python client and the launcher resolve relative ones",
            field="model_dir",
        )
    if max_restarts is not None and (
        isinstance(max_restarts, bool)
        or not isinstance(max_restarts, int)
        or not 0 <= max_restarts <= MAX_RESTARTS
    ):
        raise InvalidSpec(
            f"max_restarts must be between 0 and {MAX_RESTARTS}, got {max_restarts!r}",
            field="max_restarts",
        )
    if not isinstance(preemptible, bool):
        raise InvalidSpec(
            f"preemptible must be true or false, got {preemptible!r}", field="preemptible"
        )
    if not isinstance(hold, bool):
        raise InvalidSpec(f"hold must be true or false, got {hold!r}", field="hold")
    spec = JobSpec(
        params_yaml=params_yaml,
        num_csx=num_csx,
        num_steps=num_steps,
        mode=parsed_mode,
        labels=clean_labels,
        priority=priority,
        model_dir=model_dir,
        max_restarts=max_restarts,
        preemptible=preemptible,
        queue=validate_queue_name(queue) if queue else DEFAULT_QUEUE,
        depends_on=parse_dependencies(depends_on),
        comment=validate_text(comment, "comment", MAX_COMMENT),
        array=array,
        sweep=dict(sweep or {}),
        hold=hold,
        time_limit=format_time_limit(parse_time_limit(time_limit)) if time_limit else "",
        num_csx_min=num_csx_min,
    )
    if array or sweep:  # checked before anything is expanded (services/arrays.py expands)
        if not isinstance(array, str):
            raise InvalidSpec("array must be text, e.g. 0-31%4", field="array")
        array_tasks(array, spec.sweep)
    spec.__dict__["params"] = params  # seed the cached parses: once per submit
    if typed is not None:
        spec.__dict__["typed_params"] = typed
    return spec


def checkpoint_path_of(spec: JobSpec) -> str | None:
    """The checkpoint the job resumes from (runconfig.checkpoint_path), if any."""
    runconfig = spec.params.get("runconfig") or {}
    path = runconfig.get("checkpoint_path") if isinstance(runconfig, dict) else None
    return path if isinstance(path, str) and path else None


def with_checkpoint_path(spec: JobSpec, path: str) -> JobSpec:
    """`spec` resuming from `path` instead (the params written out again)."""
    params = {
        **spec.params,
        "runconfig": {**spec.params.get("runconfig", {}), "checkpoint_path": path},
    }
    new = dataclasses.replace(spec, params_yaml=yaml.safe_dump(params, sort_keys=False))
    new.__dict__["params"] = params
    return new


def with_time_limit(spec: JobSpec, seconds: int | None) -> JobSpec:
    """`spec` with a time limit of `seconds` (None: none), as its queue gives it."""
    text = format_time_limit(seconds) if seconds is not None else ""
    if text == spec.time_limit:
        return spec
    new = dataclasses.replace(spec, time_limit=text)
    new.__dict__["params"] = spec.params
    return new


def with_data_dirs(spec: JobSpec, paths: Mapping[str, str]) -> JobSpec:
    """`spec` reading its data sets from `paths` instead (by input section, e.g.
    `train_input`; the params written out again)."""
    params = dict(spec.params)
    for section, path in paths.items():
        params[section] = {**params.get(section, {}), "data_dir": path}
    new = dataclasses.replace(spec, params_yaml=yaml.safe_dump(params, sort_keys=False))
    new.__dict__["params"] = params
    return new


def parse_mode(mode: str | Mode) -> Mode:
    try:
        return Mode(mode)
    except ValueError:
        choices = ", ".join(m.value for m in Mode)
        raise InvalidSpec(f"mode {mode!r} is not one of {choices}", field="mode") from None


def validate_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Kubernetes label syntax: `[prefix/]name` keys, values of at most 63 characters."""
    if len(labels) > MAX_LABELS:
        raise InvalidSpec(f"at most {MAX_LABELS} labels are allowed", field="labels")
    for key, value in labels.items():
        _check_label_key(key)
        if value and not _LABEL_NAME_RE.match(value):
            raise InvalidSpec(
                f"label value {value!r} for {key!r} must be at most 63 characters of "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                field="labels",
            )
    return dict(labels)


def sim_step_seconds(labels: Mapping[str, str]) -> float | None:
    """The step time the label `appliance.io/sim-step-seconds` asks of the simulated backend,
    None without the label. InvalidSpec naming the label unless it is a number of seconds from
    0 to MAX_SIM_STEP_SECONDS (0: the job ends as soon as it runs)."""
    text = labels.get(SIM_STEP_SECONDS_LABEL)
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_SIM_STEP_SECONDS:  # NaN and infinities fail too
        raise InvalidSpec(
            f"label {SIM_STEP_SECONDS_LABEL} must be a number of seconds from 0 to "
            f"{MAX_SIM_STEP_SECONDS:g}, got {text!r}",
            field="labels",
        )
    return seconds


def _check_label_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        raise InvalidSpec(
            f"label key {key!r} has an invalid prefix; use a DNS subdomain like example.com/",
            field="labels",
        )
    if not _LABEL_NAME_RE.match(name):
        raise InvalidSpec(
            f"label key {key!r} must be at most 63 characters of letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit",
            field="labels",
        )


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_REASON = 1024
MAX_HOLDER = 300


def validate_text(text: str, field: str, max_chars: int) -> str:
    """One line of free text a user gives (a cancel reason, a lease holder), shown later to
    other users: at most `max_chars` characters and no control characters (no escape sequence
    reaches another user's terminal from here). Returns it stripped."""
    text = text.strip()
    if len(text) > max_chars:
        raise InvalidSpec(f"{field} must be at most {max_chars} characters", field=field)
    hidden = hidden_character(text)
    if hidden is not None:
        raise InvalidSpec(
            f"{field} must be one line of visible text (it has {hidden}, a control or "
            "invisible character)",
            field=field,
        )
    return text


def validate_user(user: str) -> str:
    if not user or len(user) > MAX_USER or not _USER_RE.match(user):
        raise InvalidSpec(
            "user must be 1-253 characters of letters, digits, '-', '_', '.' or '@'",
            field="user",
        )
    return user


def parse_label_selector(text: str) -> dict[str, str]:
    """`k=v,k2=v2` as used by csctl -l."""
    selector: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise InvalidSpec(f"label selector {part!r} must be key=value", field="labels")
        selector[key.strip()] = value.strip()
    return validate_labels(selector)
