"""The launcher's command line (`python -m appliance.run`): its options, in the Model Zoo's
run.py spelling (--num_csx, --model_dir, --job_labels a=1 b=2), with click as every command
line of the project; appliance/client/launcher.py runs what they ask for."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from appliance.client import DEFAULT_ADDRESS
from appliance.client.lease import DEFAULT_LEASE_SECONDS
from appliance.client.user_config import ENV_SERVER, ENV_TOKEN
from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import Mode
from appliance.domain.spec_document import spec_fields

F = TypeVar("F", bound=Callable[..., object])


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """The launcher's command line, parsed."""

    params: str
    num_csx: str  # N, or MIN-MAX (domain/elastic.py)
    num_steps: int
    model_dir: str
    mode: str
    checkpoint_path: str | None
    autoload_last_checkpoint: bool | None
    job_labels: tuple[str, ...]
    job_priority: str
    max_restarts: int | None
    job_queue: str | None
    depends_on: tuple[str, ...]
    sweep: tuple[str, ...]
    not_preemptible: bool
    detach: bool
    lease_seconds: float
    server: str
    token: str | None
    # The spec fields with a launcher option of their own (FieldInfo.option, e.g. --comment),
    # by field name: only those given.
    spec_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> LaunchOptions:
        """The options from click's values (spec_options gathered from their options)."""
        spec = {
            key.removeprefix(_SPEC_PREFIX): value
            for key, value in given.items()
            if key.startswith(_SPEC_PREFIX) and value is not None
        }
        rest = {k: v for k, v in given.items() if not k.startswith(_SPEC_PREFIX)}
        return cls(**rest, spec_options=spec)


# Options that take every value up to the next option, as the Model Zoo's run.py spells them
# (`--job_labels team=nlp run=7`); click takes such an option once per value.
_VARIADIC = frozenset({"--job_labels", "--depends_on"})


def spread_variadic(argv: Sequence[str]) -> list[str]:
    """`--job_labels a=1 b=2` as `--job_labels a=1 --job_labels b=2`: each value after a
    variadic option, up to the next option, gets the option of its own."""
    spread: list[str] = []
    variadic: str | None = None
    for arg in argv:
        if arg.startswith("-"):
            variadic = arg if arg in _VARIADIC else None
        elif variadic is not None and spread[-1] != variadic:
            spread.append(variadic)
        spread.append(arg)
    return spread


_OPTIONS = [
    click.option("-p", "--params", required=True, help="Params YAML file (Model Zoo style)."),
    click.option(
        "--num_csx",
        default="1",
        show_default=True,
        metavar="N|MIN-MAX",
        help="CS-2 systems to run on, or a range (2-8: elastic, weight streaming only): it "
        "starts on the most that are free, resumes after a preemption on what is free then, "
        "and grows back at a checkpoint when systems are idle and no job waits; the global "
        "batch and the result stay those of a fixed size.",
    ),
    click.option(
        "--num_steps",
        type=int,
        default=None,
        help="The step training ends at (not with --mode eval or compile).",
    ),
    click.option(
        "-o",
        "--model_dir",
        default="",
        help="Output directory, on a filesystem the appliance shares (default: your own directory "
        "on the appliance, users/<you>/<job id>; printed at the end).",
    ),
    click.option(
        "-m",
        "--mode",
        type=click.Choice([m.value for m in Mode]),
        default=Mode.TRAIN.value,
        show_default=True,
        help="train; eval (evaluate --checkpoint_path, else the model dir's newest checkpoint; "
        "no --num_steps); train_and_eval (train, "
        "evaluating every runconfig.eval_steps and at the end, and print the final evaluation); "
        "compile (print the compile report: layers, memory, bytes per step; nothing runs).",
    ),
    click.option(
        "--checkpoint_path",
        default=None,
        help="Checkpoint to start from (.npz); default: the newest in --model_dir, if any.",
    ),
    click.option(
        "--autoload_last_checkpoint",
        type=click.BOOL,
        default=None,
        metavar="true|false",
        help="runconfig.autoload_last_checkpoint: false starts over at step 0 in a model dir "
        "that holds checkpoints (the earlier run's files moved to earlier_runs/); default true: "
        "training continues from its newest checkpoint, as in the Model Zoo.",
    ),
    click.option(
        "--job_labels",
        multiple=True,
        metavar="K=V",
        help="Labels for the job: one or more K=V after the option.",
    ),
    click.option(
        "--job_priority",
        default="p2",
        show_default=True,
        help="p1 runs first, p3 last (p0: admins only).",
    ),
    click.option(
        "--max_restarts",
        type=int,
        default=None,
        help="Restart from the newest checkpoint after a retryable failure (a replica killed by a "
        "signal, a lost node) up to this many times (default: the cluster's, 0 unless set).",
    ),
    click.option(
        "--job_queue",
        default=None,
        help="The queue to submit to (default: default); `csctl get queues` lists them.",
    ),
    click.option(
        "--depends_on",
        multiple=True,
        metavar="[COND:]JOB",
        help="Run only after these jobs, one or more after the option: wsjob-… (it succeeded), or "
        "afterany:… (it ended), afternotok:… (it failed, was cancelled or timed out). A broken "
        "dependency cancels the job.",
    ),
    click.option(
        "--sweep",
        multiple=True,
        metavar="KEY=V1,V2",
        help="Submit the grid of params overrides as an array, one task per point: "
        "--sweep optimizer.learning_rate=1e-3,3e-3 --sweep train_input.batch_size=64,128 "
        "(with --array %N: at most N run at once).",
    ),
    click.option(
        "--not_preemptible",
        is_flag=True,
        help="Never preempted by a job of higher priority (admins only).",
    ),
    click.option("--detach", is_flag=True, help="Submit without a lease, print the id and exit."),
    click.option(
        "--lease_seconds",
        type=float,
        default=DEFAULT_LEASE_SECONDS,
        show_default=True,
        help="The job is cancelled when this launcher is gone this long (0 = detached).",
    ),
    click.option(
        "--server",
        envvar=ENV_SERVER,
        default=DEFAULT_ADDRESS,
        metavar="HOST:PORT",
        help=f"The appliance's gRPC address (default ${ENV_SERVER}, else {DEFAULT_ADDRESS}).",
    ),
    click.option(
        "--token",
        default=None,
        metavar="TOKEN",  # the client looks in $CSCTL_TOKEN, then csctl's file
        help=f"Bearer token when authentication is on (default ${ENV_TOKEN}, else the `token:` of "
        "csctl's config file).",
    ),
]


def sweep_of(items: Sequence[str]) -> dict[str, Any]:
    """`--sweep KEY=V1,V2 ...` as submit's `sweep` argument ({} when none is given)."""
    if not items:
        return {}
    sweep: dict[str, str] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep:
            raise InvalidSpec(
                f"sweep: {item[:64]!r} must be KEY=V1,V2 (e.g. optimizer.learning_rate=1e-3,3e-3)",
                field="sweep",
            )
        if key.strip() in sweep:  # the second would replace the first: say so instead
            raise InvalidSpec(
                f"sweep: {key.strip()[:64]!r} is given twice; give its values once, "
                "comma-separated (KEY=V1,V2)",
                field="sweep",
            )
        sweep[key.strip()] = values
    return {"sweep": sweep}


_SPEC_PREFIX = "spec__"
_CLICK_TYPES = {str: click.STRING, int: click.INT, float: click.FLOAT}


def _spec_options() -> list[Callable[[F], F]]:
    """An option for each spec field that names one (FieldInfo.option): the field's type, no
    default (the spec's), the field's description as help."""
    return [
        click.option(
            f.info.option, _SPEC_PREFIX + f.name, is_flag=True, default=None, help=f.info.doc
        )
        if f.hint is bool  # a flag: given, true; else the spec's default
        else click.option(
            f.info.option,
            _SPEC_PREFIX + f.name,
            type=_CLICK_TYPES.get(f.hint, click.STRING),
            default=None,
            help=f.info.doc,
        )
        for f in spec_fields()
        if f.info.option
    ]


def launch_options(fn: F) -> F:
    """Add the launcher's options to the click command `fn`."""
    for option in reversed([*_OPTIONS[:-4], *_spec_options(), *_OPTIONS[-4:]]):
        fn = option(fn)
    return fn
