"""How a door's renderings of job summaries are kept in the store across restarts, and the name
of the code that renders them.

A kept rendering is served only for the job version it was rendered from (store/listing.py)
and only by code of the same `form`: a digest of the files of every module that shapes it, the
door's and the store's (rows, tables, and every migration, since a migration may rewrite rows
without bumping their version). Code that changed in any of them renders everything again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Generic, TypeVar

from appliance.domain import arrays, dependencies, job, phases, spec, spec_document, spec_fields
from appliance.store import listing as store_listing
from appliance.store import rows, tables
from appliance.store.engine import MIGRATIONS

T = TypeVar("T")

# What the store and the domain contribute to a summary: the columns read, how a row becomes a
# Job, the schema.
_SUMMARY_MODULES = (
    job, phases, spec, spec_fields, spec_document, dependencies, store_listing, rows, tables,
    arrays,  # a task's place in its array (TaskOf)
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Keeping(Generic[T]):
    """A door's renderings as kept: `form` names the code (rendering_form), `dump` and `load`
    turn a rendering into bytes and back."""

    form: str
    dump: Callable[[T], bytes]
    load: Callable[[bytes], T]


def rendering_form(door_modules: Iterable[ModuleType]) -> str:
    """A digest of the files of `door_modules` (those that render a Job into what the door
    sends) and of the store's and the domain's summary code. When a file cannot be read, a
    form of its own: nothing kept is served, and nothing this code keeps is served elsewhere."""
    try:
        files = {_file_of(m) for m in (*door_modules, *_SUMMARY_MODULES)}
        files.update((MIGRATIONS / "versions").glob("*.py"))
        digest = hashlib.sha256()
        for path in sorted(files):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return "unshared-" + secrets.token_hex(8)
    return digest.hexdigest()[:32]


def _file_of(module: ModuleType) -> Path:
    file = getattr(module, "__file__", None)
    if file is None:  # built in, or frozen
        raise OSError(f"{module.__name__} has no file")
    return Path(file)
