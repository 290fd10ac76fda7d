"""Model directories belong to their owners.

Replicas read and write as the coordinator's user, so the filesystem's permissions do not keep
one user's job out of another user's files: this check does, at submit. The root
(APPLIANCE_MODEL_DIRS_ROOT, default <data dir>/model_dirs) holds

    users/<user>/     made by the coordinator at the user's first submit; a job that names no
                      model_dir writes to users/<user>/<job id>
    groups/<group>/   shared by a group's members, made at the first submit into it

A path is made canonical first (absolute, `..` and symbolic links resolved) and stored that
way, so what was checked is what the replicas use; they then refuse to pass through any link
(workers/safe_files.py), so a link planted after the check leads nowhere. With authentication
on, a user's `model_dir` and `runconfig.checkpoint_path` must lie in their own directory, one
of their groups', or a directory on the admins' allow-list (APPLIANCE_MODEL_DIRS_ALLOWED);
anything else is refused naming the field. Admins, and every caller while authentication is
off (each is then an admin), may name any absolute path.

A path the job names is then checked as its replicas will use it (appliance/safe_paths.py,
the rule they share): a model dir they could not make or write (`/proc/mymodel`, a file, a
read-only directory) and a checkpoint they could not read are refused naming the field,
before systems are reserved for a job that would fail. A checkpoint of a job that depends on
others is not checked: a job it waits for may write it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, PermissionDenied, Unavailable
from appliance.domain.spec import JobSpec, with_checkpoint_path
from appliance.safe_paths import UnsafePath, check_job_dir, check_job_file

MAX_USER_DIRS_KEPT = 10_000  # users whose directory's path is kept made (then all dropped)


class ModelDirs:
    def __init__(
        self, root: Path, allowed: Sequence[Path] = (), *, check_paths: bool = True
    ) -> None:
        """`check_paths`: check at submit that the replicas can use the paths a job names
        (off for a backend whose replicas write no model dirs)."""
        self.check_paths = check_paths
        self.root = Path(os.path.realpath(root))
        self.allowed = tuple(Path(os.path.realpath(p)) for p in allowed)
        # The root as configured too: a user names paths under it before links are resolved.
        self._roots = {self.root, Path(os.path.abspath(root))}
        # Owners' directories this coordinator made (or found): a submit into one needs no
        # disk I/O. A launch makes sure it is still there (ensure_owner_dir).
        self._made: set[Path] = set()
        self._user_dirs: dict[str, Path] = {}  # user -> users/<user> (pathlib joins are slow)

    def user_dir(self, user: str) -> Path:
        made = self._user_dirs.get(user)
        if made is None:
            if len(self._user_dirs) >= MAX_USER_DIRS_KEPT:
                self._user_dirs.clear()
            made = self._user_dirs[user] = self.root / "users" / user
        return made

    def group_dir(self, group: str) -> Path:
        return self.root / "groups" / group

    def needs_disk(self, spec: JobSpec, checkpoint: str | None, user: str) -> bool:
        """Whether `place` touches the disk for this submit (resolving a path it was given, or
        making the owner's directory): if not, it can run on the event loop."""
        return bool(spec.model_dir or checkpoint) or self.user_dir(user) not in self._made

    def place(
        self, spec: JobSpec, checkpoint: str | None, user: str, job_id: str, by: Principal | None
    ) -> JobSpec:
        """`spec` with its model dir (and checkpoint path) canonical and checked for `user`
        (`by` the authenticated caller, None with authentication off); makes the owner's
        directory. Raises PermissionDenied or InvalidSpec naming the field."""
        restricted = by is not None and not by.admin
        groups = by.groups if by is not None else ()
        if not spec.model_dir:
            owner = self.user_dir(user)
            if owner in self._made and not checkpoint:  # the common case: nothing to check
                return dataclasses.replace(spec, model_dir=f"{owner}/{job_id}")
            model_dir = owner / job_id
        else:
            model_dir = self.owned(
                spec.model_dir, user, groups, "model_dir", restricted=restricted
            )
        resume = None
        if checkpoint:
            resume = self.owned(checkpoint, user, groups, "checkpoint_path", restricted=restricted)
            if str(resume) != checkpoint:
                spec = with_checkpoint_path(spec, str(resume))
        self._make_owner_dir(model_dir)
        if self.check_paths and spec.model_dir:
            usable(check_job_dir, model_dir, "model_dir")
        if self.check_paths and resume is not None and not spec.depends_on:
            usable(check_job_file, resume, "checkpoint_path")
        return dataclasses.replace(spec, model_dir=str(model_dir))

    def owned(
        self,
        given: str,
        user: str,
        groups: Sequence[str],
        field: str,
        *,
        restricted: bool,
        allowed: Sequence[Path] | None = None,
        resolve: bool = True,
    ) -> Path:
        """`given` canonical (`..` folded only, without `resolve`). A restricted caller's path
        is checked as written first (`..` folded, nothing resolved: no link outside their
        reach is followed, no lookup of another user's files is made), then again once links
        are resolved; it must lie in their own directory, one of their groups' or one of
        `allowed` (default: the model dirs' allow-list)."""
        allowed = self.allowed if allowed is None else tuple(allowed)
        written = Path(os.path.normpath(given))
        if restricted:
            self._check_owned(written, given, user, groups, field, allowed)
        if not resolve:
            return written
        try:
            path = canonical(given)
        except OSError as exc:  # a link the coordinator may not read (/proc/1/root)
            raise InvalidSpec(
                f"{field} {given!r} cannot be resolved: {exc.strerror or exc}", field=field
            ) from None
        if restricted:
            self._check_owned(path, given, user, groups, field, allowed)
        return path

    def _check_owned(
        self,
        path: Path,
        given: str,
        user: str,
        groups: Sequence[str],
        field: str,
        allowed: Sequence[Path],
    ) -> None:
        names = [Path("users") / user, *(Path("groups") / g for g in groups if _safe_name(g))]
        owned = [root / name for root in self._roots for name in names]
        if any(path.is_relative_to(d) for d in [*owned, *allowed]):
            return
        theirs = f"{self.user_dir(user)}/"
        if groups:
            theirs += f", {self.root / 'groups'}/<{' or '.join(groups)}>/"
        raise PermissionDenied(
            f"{field} {given!r} is not yours: use a path under {theirs} or a directory an "
            "admin allowed",
            field=field,
        )

    def ensure_owner_dir(self, model_dir: Path) -> None:
        """Make users/<user> or groups/<group> (0750) when `model_dir` is in one and it is
        not there: before a job's replicas start, which would make it with a wider mode."""
        owner = self._owner_dir(model_dir)
        if owner is not None and not owner.is_dir():
            self._made.discard(owner)
            self._make_owner_dir(model_dir)

    def _owner_dir(self, model_dir: Path) -> Path | None:
        for kind in ("users", "groups"):
            base = self.root / kind
            if model_dir.is_relative_to(base) and model_dir != base:
                return base / model_dir.relative_to(base).parts[0]
        return None

    def _make_owner_dir(self, model_dir: Path) -> None:
        """Make users/<user> or groups/<group> when the model dir is in one (0750), once."""
        owner = self._owner_dir(model_dir)
        if owner is None or owner in self._made:
            return
        try:
            owner.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as exc:
            raise Unavailable(
                f"the coordinator cannot make the model directory {owner} "
                f"({exc.strerror}); tell an admin"
            ) from None
        self._made.add(owner)


def usable(check: Callable[[Path], None], path: Path, field: str) -> None:
    """`check(path)`, its refusal an InvalidSpec naming `field`."""
    try:
        check(path)
    except UnsafePath as exc:
        raise InvalidSpec(f"{field} {exc}", field=field) from None


def canonical(path: str) -> Path:
    """`path` absolute with `..` and symbolic links resolved (what exists of it)."""
    return Path(os.path.realpath(path))


def _safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in {".", ".."} and "\0" not in name
