"""A job's data sets belong to their owners: the model-dir rules for train_input.data_dir and
eval_input.data_dir, on real directories and links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.domain.spec import JobSpec, validate_spec
from appliance.services.data_dirs import DataDirs
from appliance.services.model_dirs import ModelDirs

ALICE = Principal("alice", ("nlp",))
ADMIN = Principal("root", (), admin=True)


def spec(
    train: str | None = None, evaluate: str | None = None, mode: str = "train_and_eval"
) -> JobSpec:
    params: dict[str, object] = {"model": {"name": "fc_mnist"}}
    if train is not None:
        params["train_input"] = {"data_dir": train, "batch_size": 8}
    if evaluate is not None:
        params["eval_input"] = {"data_dir": evaluate}
    return validate_spec(params_yaml=params, num_csx=1, num_steps=5, mode=mode)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for where in ("root/users/alice/mnist", "root/users/bob/mnist", "root/groups/nlp/owt",
                  "root/groups/cv/imgs", "datasets/mnist", "elsewhere/mnist"):  # fmt: skip
        (tmp_path / where).mkdir(parents=True)
    return tmp_path


@pytest.fixture
def dirs(root: Path) -> DataDirs:
    return DataDirs(ModelDirs(root / "root"), allowed=[root / "datasets"])


def data_dir(placed: JobSpec, section: str = "train_input") -> str:
    return str(placed.params[section]["data_dir"])


def test_a_user_reads_their_own_their_groups_and_the_shared_data_sets(
    dirs: DataDirs, root: Path
) -> None:
    for where in ("root/users/alice/mnist", "root/groups/nlp/owt", "datasets/mnist"):
        path = str(root / where)
        assert data_dir(dirs.place(spec(path, path), "alice", ALICE)) == path


@pytest.mark.parametrize(
    "where",
    [
        "root/users/bob/mnist",  # another user's
        "root/groups/cv/imgs",  # a group alice is not in
        "root/users/alice/../bob/mnist",  # `..` out of her own
        "elsewhere/mnist",  # not on the allow-list
        "root/users",  # everyone's
    ],
)
def test_anything_else_is_refused_naming_the_field(dirs: DataDirs, root: Path, where: str) -> None:
    with pytest.raises(PermissionDenied, match=r"train_input.data_dir .* is not yours") as refused:
        dirs.place(spec(str(root / where)), "alice", ALICE)
    assert refused.value.field == "train_input.data_dir"
    with pytest.raises(PermissionDenied) as refused:
        dirs.place(spec(str(root / "datasets/mnist"), str(root / where)), "alice", ALICE)
    assert refused.value.field == "eval_input.data_dir"


def test_a_link_in_her_own_directory_to_another_users_data_is_refused(
    dirs: DataDirs, root: Path
) -> None:
    link = root / "root/users/alice/bobs"
    link.symlink_to(root / "root/users/bob/mnist")
    with pytest.raises(PermissionDenied, match="is not yours"):
        dirs.place(spec(str(link)), "alice", ALICE)


def test_a_link_to_her_own_data_is_stored_canonical(dirs: DataDirs, root: Path) -> None:
    link = root / "root/users/alice/latest"
    link.symlink_to(root / "root/users/alice/mnist")

    placed = dirs.place(spec(str(link)), "alice", ALICE)

    assert data_dir(placed) == str(root / "root/users/alice/mnist")
    assert "latest" not in placed.params_yaml


@pytest.mark.parametrize("by", [ADMIN, None], ids=["admin", "auth-off"])
def test_admins_and_everyone_without_auth_read_any_directory(
    dirs: DataDirs, root: Path, by: Principal | None
) -> None:
    path = str(root / "root/users/bob/mnist")
    assert data_dir(dirs.place(spec(path), "alice", by)) == path


@pytest.mark.parametrize("by", [ALICE, None], ids=["auth-on", "auth-off"])
def test_a_data_dir_that_is_not_a_directory_is_refused(
    dirs: DataDirs, root: Path, by: Principal | None
) -> None:
    (root / "root/users/alice/file").write_text("not a directory")
    fifo = root / "root/users/alice/fifo"
    os.mkfifo(fifo)
    for where, says in (
        ("root/users/alice/absent", "does not exist"),
        ("root/users/alice/file", "not a directory"),
        ("root/users/alice/fifo", "not a directory"),
    ):
        with pytest.raises(InvalidSpec, match=f"train_input.data_dir .*{says}") as refused:
            dirs.place(spec(str(root / where)), "alice", by)
        assert refused.value.field == "train_input.data_dir"


def test_without_the_shared_filesystem_only_the_path_as_written_is_checked(root: Path) -> None:
    """Pods read data sets from a volume the coordinator does not see: nothing is looked up
    here, and the rules hold on the path as written."""
    dirs = DataDirs(ModelDirs(root / "root"), allowed=[root / "datasets"], shared=False)
    absent = str(root / "datasets/not-here/../owt")

    assert data_dir(dirs.place(spec(absent), "alice", ALICE)) == str(root / "datasets/owt")
    with pytest.raises(PermissionDenied, match="is not yours"):
        dirs.place(spec(str(root / "root/users/alice/../bob/x")), "alice", ALICE)


def test_a_synthetic_job_is_left_as_it_is(dirs: DataDirs) -> None:
    synthetic = spec()
    assert dirs.place(synthetic, "alice", ALICE) is synthetic


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_only_the_data_set_the_mode_reads_is_checked(
    dirs: DataDirs, root: Path, mode: str
) -> None:
    # As the Model Zoo's run.py: a --mode train job never opens eval_input.data_dir.
    nowhere, fine = str(root / "no" / "such"), str(root / "root" / "users" / "alice" / "mnist")
    read, unread = (fine, nowhere) if mode == "train" else (nowhere, fine)
    dirs.place(spec(train=read, evaluate=unread, mode=mode), "alice", None)  # not refused
    with pytest.raises(InvalidSpec) as refused:
        dirs.place(spec(train=unread, evaluate=read, mode=mode), "alice", None)
    assert (
        refused.value.field == ("train_input" if mode == "train" else "eval_input") + ".data_dir"
    )


# A link the coordinator may not read: /proc/1/root of init, for any process that may not trace
# it (a user's, or root's in a container without CAP_SYS_PTRACE, as here and in CI).
UNREADABLE_LINK = "/proc/1/root"


@pytest.mark.parametrize("by", [ADMIN, None], ids=["admin", "auth-off"])
def test_a_path_through_a_link_the_coordinator_cannot_read_is_refused_naming_the_field(
    dirs: DataDirs, by: Principal | None
) -> None:
    with pytest.raises(PermissionError):  # the premise: resolving the path fails
        os.readlink(UNREADABLE_LINK)
    given = f"{UNREADABLE_LINK}/tmp"
    with pytest.raises(InvalidSpec, match=f"train_input.data_dir '{given}' cannot be") as refused:
        dirs.place(spec(given), "alice", by)
    assert refused.value.field == "train_input.data_dir"
    model_dir = validate_spec(
        params_yaml={"model": {"name": "fc_mnist"}}, num_csx=1, num_steps=5, model_dir=given
    )
    with pytest.raises(InvalidSpec, match=f"model_dir '{given}' cannot be") as refused:
        dirs.model_dirs.place(model_dir, None, "alice", "wsjob-x", by)
    assert refused.value.field == "model_dir"
