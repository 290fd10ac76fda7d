"""The gRPC, REST and web doors call use cases and never hold the Context (the store, the bus):
the composition root hands them their services. import-linter sees imports only; `jobs.ctx`
reaches the Context without one, so this reads the doors' code for such reaches."""

from __future__ import annotations

import ast
from pathlib import Path

import appliance

DOORS = ("server/grpc", "server/rest", "server/web")
CONTEXT_NAMES = {"ctx", "_ctx"}
CONTEXT_MODULES = {"appliance.services.context", "appliance.composition"}


def _door_modules() -> list[Path]:
    root = Path(appliance.__file__).parent
    return sorted(p for door in DOORS for p in (root / door).rglob("*.py"))


def _reaches(path: Path) -> list[str]:
    """Where the module reaches the Context: an attribute named ctx/_ctx, or an import of it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in CONTEXT_NAMES:
            found.append(f"{path}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = {alias.name for alias in node.names}
            if node.module in CONTEXT_MODULES or (
                node.module == "appliance.services" and "context" in names
            ):
                found.append(f"{path}:{node.lineno}: from {node.module} import ...")
            if "Context" in names and node.module.startswith("appliance."):
                found.append(f"{path}:{node.lineno}: imports Context")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in CONTEXT_MODULES:
                    found.append(f"{path}:{node.lineno}: import {alias.name}")
    return found


def test_the_doors_are_there_to_check() -> None:
    modules = {p.parent.name for p in _door_modules()}
    assert {"grpc", "rest", "web"} <= modules


def test_no_door_reaches_the_context() -> None:
    reaches = [reach for path in _door_modules() for reach in _reaches(path)]
    assert not reaches, "doors take their use cases, not the Context:\n" + "\n".join(reaches)


def test_the_check_sees_a_reach_through_a_service(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    door.write_text(
        "from appliance.services.context import Context\n"
        "def router(jobs):\n    return NodeService(jobs.ctx), jobs._ctx.store\n"
    )
    assert len(_reaches(door)) == 4  # the module, the name, .ctx, ._ctx
