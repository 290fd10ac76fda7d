"""A gate against the next submit regression, cheap enough for every CI run (~50 s).

Absolute rates move between machines and with what else runs, so the gate judges a ratio: the
coordinator's CPU time per submitted job (every thread, read from /proc; 50 gRPC clients
submitting) over the same figure for the coordinator of a reference commit, measured in the
same run with the rounds interleaved (reference, this checkout, reference, ...), so that a
slower machine or a busy neighbour moves both. The median of the rounds' ratios must not be
above `--ceiling`.

The reference is the last commit whose submit cost was accepted: move REFERENCE forward, with
the reason in bench/README.md, when a change adds cost on purpose. Until #38 the gate divided by
the CPU time of 1,000 pure-Python YAML parses in the gate's own process; that unit moved 15-25%
with the machine's load while the code's cost did not (a run could fail by chance), and it did
not move with the C parts of a submit (gRPC, SQLite) as a slower machine moves them.

Exits 1, saying so, when the ratio is above the ceiling.

    python -m bench.submit_gate [--reference b7d558e] [--ceiling 1.10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from bench.common import (
    ROOT,
    SYSTEMS,
    CoordinatorProcess,
    code_tree,
    fresh_dir,
    prepare_store_with,
)
from bench.submit_throughput import load as submit_load

CLIENTS = 50
SUBMITS = 1500
# The last commit whose submit cost CI accepted (bench/README.md, "A gate for it"): b7d558e,
# #37's landing. Its coordinator used 3.2-3.7 ms of CPU a submit on a 2-core AMD EPYC, 1.47x
# what e54690b (#40's fix) used on that machine (2.04 ms): #36 and #37 added the audit record,
# the per-user caps, time limits, arrays, holds and reservations to every submit.
REFERENCE = "b7d558e"
# Interleaved runs of b7d558e against main (20bddda) while the machine's load went from 3 to 9
# gave 0.87, 0.89 and 0.89 (rounds 0.62-1.06) while each tree's own cost moved 22%.
CEILING = 1.10


def submit_cpu_ms(coordinator: CoordinatorProcess) -> tuple[float, float]:
    """One round of SUBMITS against `coordinator`: (its CPU ms a submit, submits/s)."""
    before = coordinator.cpu_seconds()
    run = asyncio.run(submit_load(coordinator.address, SUBMITS, CLIENTS, 120.0))
    if run["errors"]:
        raise SystemExit(f"submit gate: submits failed: {run['errors']}")
    return (coordinator.cpu_seconds() - before) * 1000 / SUBMITS, float(run["acked_per_s"])


def started(stack: ExitStack, tree: Path | None, name: str) -> CoordinatorProcess:
    """A coordinator of `tree` (None: this checkout) on a fresh store, stopped with `stack`."""
    data_dir = fresh_dir(f"submit-gate-{name}")
    prepare_store_with(tree, data_dir, SYSTEMS)
    coordinator = stack.enter_context(CoordinatorProcess(data_dir, tree=tree))
    coordinator.wait_address()
    return coordinator


def reference_tree(commit: str) -> Path | None:
    """The reference's code, or exit saying why not (a shallow clone has no history)."""
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT,
                           capture_output=True, check=False)  # fmt: skip
    if known.returncode:
        raise SystemExit(
            f"submit gate: the reference commit {commit} is not in this clone (a shallow clone?):"
            " fetch the history (git fetch --unshallow) or pass --reference"
        )
    return code_tree(commit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=REFERENCE, help="the commit to compare with")
    parser.add_argument("--ceiling", type=float, default=CEILING)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ratios: list[float] = []
    costs: dict[str, list[float]] = {args.reference: [], "HEAD": []}
    rates: dict[str, list[float]] = {args.reference: [], "HEAD": []}
    with ExitStack() as stack:
        coordinators = {
            args.reference: started(stack, reference_tree(args.reference), "reference"),
            "HEAD": started(stack, None, "head"),
        }
        for _ in range(args.rounds):
            for name, coordinator in coordinators.items():
                cost, rate = submit_cpu_ms(coordinator)
                costs[name].append(cost)
                rates[name].append(rate)
            ratios.append(costs["HEAD"][-1] / costs[args.reference][-1])
    for name in costs:
        print(
            f"submit gate ({name}): {statistics.median(rates[name]):.0f} submits/s; the "
            f"coordinator's CPU a submit {statistics.median(costs[name]):.3f} ms "
            f"(rounds: {', '.join(f'{c:.2f}' for c in costs[name])})",
            flush=True,
        )
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio <= args.ceiling else "ABOVE THE CEILING"
    print(
        f"submit gate: HEAD / {args.reference} = {ratio:.2f} (rounds: "
        f"{', '.join(f'{r:.2f}' for r in ratios)}; ceiling {args.ceiling:.2f}): {verdict}",
        flush=True,
    )
    if ratio > args.ceiling:
        print("submit gate: a submit costs more than it did; profile it with "
              "python -m bench.submit_throughput --profile FILE", file=sys.stderr)  # fmt: skip
        sys.exit(1)


if __name__ == "__main__":
    main()
