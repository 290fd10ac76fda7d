"""ARCHITECTURE.md names only what exists: every path, file and `appliance.*` module it puts in
backticks is in the repository, so the map cannot silently drift from the code."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SPAN = re.compile(r"`([^`\n]+)`")
_PATHLIKE = re.compile(r"^[\w./-]+$")


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return out.splitlines()


def _named(text: str) -> tuple[set[str], set[str]]:
    paths, modules = set(), set()
    for span in _SPAN.findall(text):
        for word in span.split():
            if word.startswith("appliance.") and _PATHLIKE.match(word):
                modules.add(word.rstrip("."))
            elif _PATHLIKE.match(word) and ("/" in word or word.endswith((".py", ".md"))):
                paths.add(word.rstrip("/"))
    return paths, modules


def test_every_path_and_module_it_names_exists() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    paths, modules = _named(text)
    assert len(paths) > 40 and len(modules) >= 5
    files = _tracked()
    dirs = {str(Path(f).parent) for f in files}
    every = set(files) | {d for f in dirs for d in _parents(f)}

    def exists(name: str) -> bool:
        return any(p == name or p.endswith("/" + name) for p in every)

    assert sorted(p for p in paths if not exists(p)) == []
    missing = [
        m for m in modules
        if not exists(m.replace(".", "/") + ".py") and not exists(m.replace(".", "/"))
    ]  # fmt: skip
    assert sorted(missing) == []


def test_no_placeholder_is_left() -> None:
    assert "[[" not in (ROOT / "ARCHITECTURE.md").read_text()


def _parents(path: str) -> list[str]:
    parts = Path(path).parts
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
