"""The launcher on the user node, in the style of the Model Zoo's run.py.

    python -m appliance.run --params params.yaml --num_csx 2 --num_steps 100 \\
        --model_dir out --mode train [--job_labels team=nlp] [--job_priority p2] [--detach]
    python run.py CSX --params params.yaml ...   (an example's run.py: appliance/examples/*/)

A leading `CSX` (the Model Zoo's target device) is accepted and changes nothing: jobs run on the
appliance. `CPU` is accepted with a warning saying so: there is no local run. Without --num_steps
(or --model_dir) the params' runconfig.max_steps (runconfig.model_dir) is taken, as the Model
Zoo does. Params keys the emulation accepts but does not use are printed once each, on stderr,
as `warning: params: ...` lines.

It submits one wsjob, prints its id, then streams its phase changes and progress (a progress
bar on a terminal, plain lines otherwise) until the job ends. The job is tied to this process by
a client lease: Ctrl-C (or SIGTERM) cancels it before exiting, and if the process dies the
coordinator cancels it when the lease lapses. With --detach the job is submitted without a
lease and the launcher exits at once, printing how to follow the job.

Exit status: 0 the job SUCCEEDED (or was submitted, with --detach); 1 it FAILED or was
cancelled, or the appliance could not be reached; 2 bad input (arguments, params, a spec the
appliance rejects); 130 interrupted by Ctrl-C (143 by SIGTERM), the job cancelled.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, TypeAlias

import click

from appliance.client import ApplianceClient, JobHandle
from appliance.client.launch_options import (
    LaunchOptions,
    launch_options,
    spread_variadic,
    sweep_of,
)
from appliance.client.lease import DEFAULT_HEARTBEAT_INTERVAL
from appliance.client.params import load_params_file, max_steps_in_file, params_warnings
from appliance.client.progress import EventPrinter, describe_progress
from appliance.client.user_config import ConfigError
from appliance.domain.compile import count_in_words
from appliance.domain.display import printable
from appliance.domain.elastic import parse_csx_range
from appliance.domain.errors import ApplianceError, InvalidSpec
from appliance.domain.job import JobEvent
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import Mode, parse_label_selector
from appliance.domain.wafer import wafer_line

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
CANCEL_REASON = "the launcher was interrupted"


class _Stopped:
    """Ctrl-C or SIGTERM arrived: cancel the job and exit with `code`."""

    def __init__(self, code: int) -> None:
        self.code = code


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 99},
    epilog="Example: python -m appliance.run --params params.yaml --num_csx 2 --num_steps 100 "
    "--model_dir out --mode train --job_labels team=nlp",
)
@launch_options
@click.pass_obj
def launch(caller: Caller, /, **given: Any) -> int:
    """Submit a wsjob to the appliance and follow it to the end."""
    if given["num_steps"] is None:  # the Model Zoo's stand-in (#32)
        given["num_steps"] = max_steps_in_file(given["params"])
    if given["num_steps"] is None:
        if given["mode"] not in (Mode.COMPILE.value, Mode.EVAL.value):
            raise click.UsageError("--num_steps is required (except with --mode eval or compile)")
        given["num_steps"] = 1  # unused: an evaluation is of one checkpoint's weights
    return _launch(LaunchOptions.of(given), caller)


@dataclasses.dataclass(frozen=True)
class Caller:
    """Who runs the launcher: where it prints, and the model an example's run.py is for (the
    params' model.name when they give none, as a Model Zoo model directory's run.py knows)."""

    out: TextIO
    model: str | None = None


TARGETS = ("CSX", "CPU")  # the Model Zoo's run.py takes its target device first


def load_params(
    params_file: str,
    checkpoint_path: str | None,
    model: str | None = None,
    autoload: bool | None = None,
) -> str | dict[str, Any]:
    """The params file, or its contents with `runconfig.checkpoint_path` (absolute) or
    `runconfig.autoload_last_checkpoint` set, and model.name set to `model` when they name
    none."""
    if checkpoint_path is None and model is None and autoload is None:
        return params_file
    path = Path(params_file).expanduser()
    params = load_params_file(path)
    if not isinstance(params, dict):
        raise InvalidSpec(f"params file {path} must be a YAML mapping", field="params")
    section = params.get("model")
    if model is not None and isinstance(section, dict) and "name" not in section:
        params["model"] = {"name": model, **section}
    given: dict[str, Any] = {}
    if checkpoint_path is not None:
        given["checkpoint_path"] = os.path.abspath(os.path.expanduser(checkpoint_path))
    if autoload is not None:
        given["autoload_last_checkpoint"] = autoload
    if not given:
        return params
    runconfig = params.get("runconfig") or {}
    if not isinstance(runconfig, dict):
        raise InvalidSpec(f"params file {path}: runconfig must be a mapping", field="params")
    params["runconfig"] = {**runconfig, **given}
    return params


def parse_labels(items: Sequence[str]) -> dict[str, str]:
    """`k=v` arguments (each may also be `k=v,k2=v2`) as one mapping; raises InvalidSpec."""
    labels: dict[str, str] = {}
    for item in items:
        labels.update(parse_label_selector(item))
    return labels


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, *, model: str | None = None
) -> int:
    """Run the launcher; returns the exit status. `model`: the model an example's run.py is
    for (the params' model.name when they name none)."""
    args = spread_variadic(sys.argv[1:] if argv is None else argv)
    if args and not args[0].startswith("-") and args[0].upper() not in TARGETS:
        return _error(
            f"{printable(repr(args[0][:40]))} is not a target: the first argument is CSX (or "
            "CPU), as in the Model Zoo's run.py (see --help)",
            EXIT_BAD_INPUT,
        )
    target = args.pop(0).upper() if args and args[0].upper() in TARGETS else "CSX"
    if target == "CPU":  # accepted, as a params key the emulation does not use is
        print(
            "warning: CPU: there is no local run here; the job runs on the appliance's emulated "
            "CS-2 systems, as with CSX",
            file=sys.stderr,
        )
    caller = Caller(out or sys.stdout, model)
    prog = "python run.py CSX" if model else "python -m appliance.run"
    try:
        code = launch.main(args, prog_name=prog, standalone_mode=False, obj=caller)
    except click.UsageError as exc:
        return _error(f"{exc.format_message()} (see --help)", EXIT_BAD_INPUT)
    return int(code or 0)  # --help answers None


def _launch(options: LaunchOptions, caller: Caller) -> int:
    out = caller.out
    try:
        params = load_params(
            options.params,
            options.checkpoint_path,
            caller.model,
            options.autoload_last_checkpoint,
        )
        labels = parse_labels(options.job_labels)
    except InvalidSpec as exc:
        return _error(exc.message, EXIT_BAD_INPUT)
    try:
        return _submit_and_follow(options, params, labels, out)
    except KeyboardInterrupt:  # before the job was known: nothing to cancel
        return _error("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # whoever read the output went away (`| head -1`): stop quietly
        if out is sys.stdout:  # and let the exit's flush go nowhere instead of failing again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _compile(
    client: ApplianceClient, args: LaunchOptions, params: str | dict[str, Any], out: TextIO
) -> int:
    """--mode compile: print the compile report (nothing runs, nothing is reserved)."""
    try:
        _warn(params_warnings(params))
        most = parse_csx_range(args.num_csx)[0]  # the plan of its largest size
        report = client.compile(params, num_csx=most, num_steps=args.num_steps)
    except InvalidSpec as exc:
        return _error(exc.message, EXIT_BAD_INPUT)
    except ApplianceError as exc:
        return _error(exc.message, EXIT_FAILED)
    mib = 1 << 20
    _say(f"model {report.model}: {report.unit_count} streamed layers", file=out)
    for unit in report.units:
        tensors = ", ".join(f"{n}{list(s)}" for n, s in unit.tensors)
        _say(f"  layer {unit.index}: {unit.parameters} parameters ({tensors})", file=out)
    if report.unit_count > len(report.units):
        _say(f"  ... and {report.unit_count - len(report.units)} more layers", file=out)
    count = report.parameter_count  # the count, then its bytes (#32: said only the bytes)
    _say(
        f"parameters {count_in_words(count)} ({count:,}): {report.parameter_bytes / mib:.2f} "
        f"MiB; MemoryX holds {report.memory_bytes / mib:.2f} MiB with optimizer state",
        file=out,
    )
    counts = ", ".join(f"{g.role.value} x{g.count}" for g in report.plan.groups)
    _say(f"replicas: {counts}", file=out)
    _say(
        f"bytes per step: {report.bytes_per_step / mib:.2f} MiB (MemoryX->SwarmX "
        f"{report.bytes_memoryx_to_swarmx / mib:.2f}, SwarmX->CS-2 "
        f"{report.bytes_swarmx_to_cs2 / mib:.2f}, CS-2->SwarmX "
        f"{report.bytes_cs2_to_swarmx / mib:.2f}, SwarmX->MemoryX "
        f"{report.bytes_swarmx_to_memoryx / mib:.2f})",
        file=out,
    )
    _say(wafer_line("pipelined", report.wafer_pipelined, report.wafer_bytes), file=out)
    _say(wafer_line("weight streaming", report.wafer_streaming, report.wafer_bytes), file=out)
    return 0


def _submit_and_follow(
    args: LaunchOptions, params: str | dict[str, Any], labels: dict[str, str], out: TextIO
) -> int:
    try:
        lease = args.lease_seconds
        client = ApplianceClient(
            args.server,
            detach=args.detach or lease == 0,
            token=args.token,
            lease_seconds=lease,
            heartbeat_interval=min(DEFAULT_HEARTBEAT_INTERVAL, lease / 4) if lease > 0 else 1.0,
        )
    except InvalidSpec as exc:
        return _error(exc.message, EXIT_BAD_INPUT)
    except ConfigError as exc:  # csctl's config file, read for the token
        return _error(str(exc), EXIT_BAD_INPUT)
    with client:
        if args.mode == Mode.COMPILE.value:
            return _compile(client, args, params, out)
        try:
            job = client.submit(
                params=params,
                num_csx=args.num_csx,
                num_steps=args.num_steps,
                mode=args.mode,
                labels=labels,
                priority=args.job_priority,
                model_dir=args.model_dir,
                max_restarts=args.max_restarts,
                preemptible=not args.not_preemptible,
                queue=args.job_queue,
                depends_on=list(args.depends_on),
                **sweep_of(args.sweep),
                **args.spec_options,
            )
        except InvalidSpec as exc:
            return _error(exc.message, EXIT_BAD_INPUT)
        except ApplianceError as exc:
            return _error(exc.message, EXIT_FAILED)
        steps = "eval" if args.mode == Mode.EVAL.value else f"{args.num_steps} steps"
        if job.array_id:  # an array's tasks run detached
            _say(
                f"submitted array {job.array_id} ({args.num_csx} CS-2 each, {steps}); see its "
                f"tasks with `csctl get array {job.array_id}`",
                file=out,
            )
            _warn(job.warnings)
            return EXIT_OK
        _say(f"submitted {job.id} ({args.num_csx} CS-2, {steps})", file=out)
        out.flush()
        _warn(job.warnings)
        if args.detach:
            _say(
                f"detached: the job runs on its own. Follow it with `csctl events {job.id} -f`"
                f" or `csctl logs {job.id} -f`; stop it with `csctl cancel job {job.id}`.",
                file=out,
            )
            return EXIT_OK
        return _follow(job, out)


def _follow(job: JobHandle, out: TextIO) -> int:
    """Print the job's events until it ends; Ctrl-C or SIGTERM cancels it.

    The events are read on a thread of their own and handed over through a SimpleQueue, which
    is also what the signal handler writes to: the main thread only ever waits on that queue.
    A handler that raised while the main thread was inside gRPC could leave the channel's
    bookkeeping half-done, and closing it then hung.
    """
    printer = EventPrinter(out)
    inbox: queue.SimpleQueue[_Item] = queue.SimpleQueue()

    def stop(signum: int, frame: FrameType | None) -> None:
        inbox.put(_Stopped(EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED))

    previous = _set_handlers(stop)
    try:
        threading.Thread(target=_read_events, args=(job, inbox), daemon=True).start()
        while not isinstance(item := inbox.get(), _EndOfEvents):
            if isinstance(item, _Stopped):
                _set_handlers(signal.SIG_IGN)  # a second Ctrl-C must not abort the cancel
                printer.message(f"interrupted: cancelling {job.id} ...")
                return _cancel(job, printer, item.code)
            if isinstance(item, _Notice):  # the coordinator went away or came back
                printer.message(item.text)
                continue
            if isinstance(item, ApplianceError):
                printer.close()
                return _error(
                    f"{item.message} (job {job.id} is cancelled when its lease lapses)", 1
                )
            if isinstance(item, Exception):
                raise item  # a bug, not the appliance's answer: let it show
            if item.reason_code != ReasonCode.PARAMS_WARNING:  # printed once, at submit
                printer.show(item)
        printer.close()
        return _outcome(job, printer, out)
    finally:
        _restore_handlers(previous)


class _EndOfEvents:
    """The job's event stream ended (after its terminal phase)."""


@dataclasses.dataclass(frozen=True)
class _Notice:
    """Something to say while following: the coordinator is unreachable, or back."""

    text: str


_Item: TypeAlias = "JobEvent | Exception | _Stopped | _EndOfEvents | _Notice"


def _read_events(job: JobHandle, inbox: queue.SimpleQueue[_Item]) -> None:
    """Put the job's events, then the end of the stream or the error that broke it."""
    try:
        for event in job.watch(notify=lambda text: inbox.put(_Notice(text))):
            inbox.put(event)
    except Exception as exc:  # an ApplianceError also once the channel closes after a cancel
        inbox.put(exc)
        return
    inbox.put(_EndOfEvents())


def _outcome(job: JobHandle, printer: EventPrinter, out: TextIO) -> int:
    final = job.status
    reason = f": {final.reason}" if final.reason else ""
    if final.phase is Phase.SUCCEEDED:
        progress = describe_progress(final.progress)
        _say(f"{job.id} SUCCEEDED ({progress}); outputs in {final.spec.model_dir}", file=out)
        return EXIT_OK
    return _error(f"{job.id} {final.phase}{reason}", EXIT_FAILED)


def _cancel(job: JobHandle, printer: EventPrinter, code: int) -> int:
    try:
        result = job.cancel(reason=CANCEL_REASON)
    except ApplianceError as exc:
        _error(f"could not cancel {job.id}: {exc.message}", EXIT_FAILED)
        return code
    state = "cancelled" if result.changed else f"already {result.job.phase}"
    printer.message(f"{job.id} {state}")
    return code


_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _set_handlers(handler: _Handler) -> dict[int, _Handler]:
    """Handle Ctrl-C and SIGTERM with `handler`; returns the handlers it replaced."""
    previous: dict[int, _Handler] = {}
    for signum in _STOP_SIGNALS:
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, handler)
    return previous


def _restore_handlers(previous: dict[int, _Handler]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _say(text: str, file: TextIO) -> None:
    """Print a line; what the server sent (reasons, paths, messages) cannot drive the
    terminal."""
    print(printable(text), file=file)


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        _say(f"warning: {line}", file=sys.stderr)


def _error(message: str, code: int) -> int:
    _say(f"error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
