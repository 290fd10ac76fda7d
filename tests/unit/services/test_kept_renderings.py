"""The name of the code that renders kept summaries: any change to a file of it renders
everything again (services/kept_renderings.py)."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

from appliance.services.kept_renderings import rendering_form


def _module_at(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_form_changes_with_any_file_of_the_door(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    door.write_text("VERSION = 1\n")
    module = _module_at(door)
    before = rendering_form([module])
    assert rendering_form([module]) == before  # the same code: the same form

    door.write_text("VERSION = 2\n")
    assert rendering_form([module]) != before
    assert rendering_form([]) != before


def test_code_whose_files_cannot_be_read_shares_no_rendering() -> None:
    nowhere = types.ModuleType("nowhere")  # no __file__
    first, second = rendering_form([nowhere]), rendering_form([nowhere])
    assert first != second
    assert first.startswith("unshared-")
