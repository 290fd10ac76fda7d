"""The one front door for phase changes (services.context.Context): every write through it is
announced to the job's watchers and wakes the loops that care, whichever of its three ways
wrote it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import appliance
from appliance.domain.phase_moves import PhaseMove
from appliance.domain.phases import Phase
from appliance.scheduler.admission import admit
from appliance.services.context import Context
from tests.unit.harness import NOW, create, new_jobs

IDS = [f"wsjob-frontdoor0000{i}" for i in range(3)]


@pytest.fixture(autouse=True)
def _three_queued_jobs(ctx: Context) -> None:
    create(ctx, new_jobs(IDS), NOW)


async def test_schedule_set_phase_and_batches_are_all_announced(ctx: Context) -> None:
    first, second, third = (f"wsjob-frontdoor0000{i}" for i in range(3))
    with ctx.bus.subscribe(first) as events_1, ctx.bus.subscribe(third) as events_3:
        [decision, *_] = admit(ctx.store.queued_jobs(), ctx.store.pool_usage()).admitted
        assert decision.job_id == first
        scheduled = await ctx.schedule(first, decision.placements)
        assert scheduled.applied and ctx.bus.reconcile_wanted.is_set()
        assert events_1.get_nowait().to_phase is Phase.SCHEDULED

        ctx.bus.schedule_wanted.clear()
        await ctx.set_phase(first, Phase.FAILED, "a replica failed", expected=Phase.SCHEDULED)
        assert events_1.get_nowait().to_phase is Phase.FAILED
        assert ctx.bus.schedule_wanted.is_set()  # its systems came back

        moves = [PhaseMove(second, Phase.CANCELLED, "batch", Phase.QUEUED),
                 PhaseMove(third, Phase.CANCELLED, "batch", Phase.QUEUED)]  # fmt: skip
        outcomes = await ctx.write_phases(ctx.store.set_phases, moves, NOW + 2)
        assert [o.applied for o in outcomes] == [True, True]
        assert events_3.get_nowait().reason == "batch"
        assert events_1.empty() and events_3.empty()


async def test_a_change_that_did_not_apply_announces_nothing(ctx: Context) -> None:
    job = "wsjob-frontdoor00000"
    with ctx.bus.subscribe(job) as events:
        lost = await ctx.set_phase(job, Phase.CANCELLED, "late", expected=Phase.RUNNING)
        assert not lost.applied
        assert events.empty() and not ctx.bus.reconcile_wanted.is_set()


# The store's phase writers, and who may reach them: the front door itself, and the one batch
# writer that runs only inside Context.write_phases (which announces what it applied).
STORE_PHASE_WRITERS = frozenset({"set_phase", "set_phases", "schedule"})
MAY_WRITE_PHASES = {
    "appliance/services/context.py": None,
    "appliance/services/cancels.py": "decide_and_write",
}


def _store_phase_writes(path: Path) -> list[tuple[int, str]]:
    """(line, enclosing function) of every reference to a phase writer of a store."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if (
            isinstance(node, ast.Attribute)
            and node.attr in STORE_PHASE_WRITERS
            and ast.unparse(node.value).split(".")[-1].lower().endswith("store")
        ):
            found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text()), "")
    return found


def test_only_the_front_door_reaches_the_stores_phase_writers() -> None:
    root = Path(appliance.__file__).parent
    reached: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).as_posix()
        if relative.startswith(("appliance/store/", "appliance/_proto/")):
            continue
        if writes := _store_phase_writes(path):
            reached[relative] = writes
    assert set(reached) == set(MAY_WRITE_PHASES), reached
    batch = MAY_WRITE_PHASES["appliance/services/cancels.py"]
    assert {function for _, function in reached["appliance/services/cancels.py"]} == {batch}
    cancels = (root / "services" / "cancels.py").read_text()
    assert f"ctx.write_phases({batch}," in cancels
