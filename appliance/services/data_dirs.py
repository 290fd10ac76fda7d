"""A job's data sets belong to their owners, as its model dir does (services/model_dirs.py).

Input workers read as the coordinator's user, so the filesystem's permissions do not keep one
user's job out of another user's data: this check does, at submit, before any file is opened.
With authentication on, a non-admin's `train_input.data_dir` and `eval_input.data_dir` must lie
in their own directory under the model dirs root (users/<user>/), one of their groups'
(groups/<group>/), or a shared data-set directory on the admins' allow-list
(APPLIANCE_DATA_DIRS_ALLOWED); anything else is refused naming the field. Admins, and every
caller while authentication is off, may name any absolute path.

As with a model dir, the path is checked as written, then made canonical (links resolved)
and checked again, and stored that way in the params; where the replicas read the
coordinator's filesystem (the local backend) it must then be a directory reached from `/`
without a link on the way (appliance/safe_paths.py), or the submit is refused naming the field.
Where they do not (pods read a volume the coordinator does not mount), only the path as
written is checked, and the input worker refuses at start what it cannot reach the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from appliance.domain.auth import Principal
from appliance.domain.params import input_sections
from appliance.domain.spec import JobSpec, with_data_dirs
from appliance.safe_paths import check_data_dir
from appliance.services.model_dirs import ModelDirs, usable


class DataDirs:
    def __init__(
        self, model_dirs: ModelDirs, allowed: Sequence[Path] = (), *, shared: bool = True
    ) -> None:
        """`allowed`: the shared data-set directories; `shared`: whether the replicas read the
        filesystem the coordinator sees (then a data_dir is checked on it at submit)."""
        self.model_dirs = model_dirs
        self.allowed = tuple(Path(os.path.realpath(p)) for p in allowed)
        self.shared = shared

    @staticmethod
    def named(spec: JobSpec) -> list[tuple[str, str]]:
        """(section, data_dir) of each input section the job's mode reads that names a data
        set (a `--mode train` job never opens eval_input.data_dir: it is not checked)."""
        found = []
        for section in input_sections(spec.mode):
            part = spec.params.get(section)
            if isinstance(part, Mapping) and isinstance(part.get("data_dir"), str):
                found.append((section, part["data_dir"]))
        return found

    def place(self, spec: JobSpec, user: str, by: Principal | None) -> JobSpec:
        """`spec` with its data dirs canonical and checked for `user` (`by` the authenticated
        caller, None with authentication off). Raises PermissionDenied or InvalidSpec naming
        the field. Touches the disk: run it off the event loop."""
        restricted = by is not None and not by.admin
        groups = by.groups if by is not None else ()
        changed: dict[str, str] = {}
        for section, given in self.named(spec):
            field = f"{section}.data_dir"
            path = self.model_dirs.owned(
                given, user, groups, field,
                restricted=restricted, allowed=self.allowed, resolve=self.shared,
            )  # fmt: skip
            if self.shared:
                usable(check_data_dir, path, field)
            if str(path) != given:
                changed[section] = str(path)
        return with_data_dirs(spec, changed) if changed else spec
