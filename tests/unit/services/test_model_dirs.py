"""Model directories and checkpoints belong to their owners: real directories and links."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.domain.spec import JobSpec, checkpoint_path_of, validate_spec
from appliance.services import model_dirs
from appliance.services.model_dirs import ModelDirs

ALICE = Principal("alice", ("nlp",))
ADMIN = Principal("root", (), admin=True)
JOB = "wsjob-modeldirs00001"


def spec(model_dir: str = "", checkpoint: str | None = None) -> JobSpec:
    params: dict[str, object] = {"model": {"name": "fc_mnist"}}
    if checkpoint is not None:
        params["runconfig"] = {"checkpoint_path": checkpoint, "seed": 3}
    return validate_spec(params_yaml=params, num_csx=1, num_steps=5, model_dir=model_dir)


@pytest.fixture
def dirs(tmp_path: Path) -> ModelDirs:
    return ModelDirs(tmp_path / "root", allowed=[tmp_path / "shared"])


def test_a_job_without_a_model_dir_writes_in_its_users_own_directory(dirs: ModelDirs) -> None:
    placed = dirs.place(spec(), None, "alice", JOB, ALICE)
    assert placed.model_dir == str(dirs.root / "users" / "alice" / JOB)
    made = dirs.root / "users" / "alice"
    assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o750


def test_once_the_users_directory_is_made_a_submit_is_placed_alike_and_still_checked(
    dirs: ModelDirs,
) -> None:
    dirs.place(spec(), None, "alice", JOB, ALICE)  # makes users/alice
    again = dirs.place(spec(), None, "alice", "wsjob-modeldirs00002", ALICE)
    assert again.model_dir == str(dirs.root / "users" / "alice" / "wsjob-modeldirs00002")
    bobs = str(dirs.root / "users" / "bob" / "run" / "checkpoint_10.npz")
    with pytest.raises(PermissionDenied) as refused:
        dirs.place(spec(checkpoint=bobs), bobs, "alice", JOB, ALICE)
    assert refused.value.field == "checkpoint_path"


def test_a_user_writes_in_their_own_their_groups_and_allowed_directories(
    dirs: ModelDirs, tmp_path: Path
) -> None:
    for model_dir in (
        dirs.root / "users" / "alice" / "run1",
        dirs.root / "groups" / "nlp" / "run1",
        tmp_path / "shared" / "scratch" / "run1",
    ):
        assert dirs.place(spec(str(model_dir)), None, "alice", JOB, ALICE).model_dir == str(
            model_dir
        )
    assert (dirs.root / "groups" / "nlp").is_dir()


@pytest.mark.parametrize(
    "where",
    [
        "root/users/bob/run1",  # another user's
        "root/groups/vision/run1",  # a group alice is not in
        "root/users/alice/../bob/run1",  # `..` out of her own
        "root/users",  # the parent of everyone's
        "elsewhere",  # outside the root
        "root/users/alice/x/../../../../elsewhere",
    ],
)
def test_a_model_dir_not_the_users_is_refused_naming_the_field(
    dirs: ModelDirs, tmp_path: Path, where: str
) -> None:
    with pytest.raises(PermissionDenied, match=r"model_dir .* is not yours") as refused:
        dirs.place(spec(str(tmp_path / where)), None, "alice", JOB, ALICE)
    assert refused.value.field == "model_dir"


def test_a_link_in_the_users_directory_to_someone_elses_is_resolved_and_refused(
    dirs: ModelDirs,
) -> None:
    bob = dirs.root / "users" / "bob"
    bob.mkdir(parents=True)
    (dirs.root / "users" / "alice").mkdir()
    (dirs.root / "users" / "alice" / "bobs").symlink_to(bob, target_is_directory=True)
    through_link = str(dirs.root / "users/alice/bobs/run1")
    with pytest.raises(PermissionDenied, match=f"model_dir '{through_link}' is not yours"):
        dirs.place(spec(through_link), None, "alice", JOB, ALICE)


def test_a_checkpoint_must_be_the_users_and_is_stored_canonical(dirs: ModelDirs) -> None:
    bobs = dirs.root / "users" / "bob" / "run" / "checkpoint_10.npz"
    with pytest.raises(PermissionDenied, match=r"checkpoint_path .* is not yours") as refused:
        dirs.place(spec(checkpoint=str(bobs)), str(bobs), "alice", JOB, ALICE)
    assert refused.value.field == "checkpoint_path"

    mine = dirs.root / "users" / "alice" / "run" / "checkpoint_10.npz"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"PK\x05\x06" + bytes(18))  # read by the replicas; checked at submit
    roundabout = str(dirs.root / "users" / "alice" / "x" / ".." / "run" / "checkpoint_10.npz")
    placed = dirs.place(spec(checkpoint=roundabout), roundabout, "alice", JOB, ALICE)
    assert checkpoint_path_of(placed) == str(mine)
    params = yaml.safe_load(placed.params_yaml)  # what the replicas are given
    assert params["runconfig"] == {"checkpoint_path": str(mine), "seed": 3}


def test_admins_and_an_open_appliance_may_name_any_path_stored_canonical(
    dirs: ModelDirs, tmp_path: Path
) -> None:
    odd = str(tmp_path / "x" / "nonexist" / ".." / ".." / "out")
    for by in (ADMIN, None):
        assert dirs.place(spec(odd), None, "alice", JOB, by).model_dir == str(tmp_path / "out")


def test_a_path_out_of_reach_is_refused_before_anything_of_it_is_looked_up(
    dirs: ModelDirs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As written, `..` folded: a FIFO, automount or slow mount elsewhere is never touched,
    and the refusal shows the path as the user gave it, not where links lead."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret-link").symlink_to("/etc/hostname")
    given = f"{dirs.root}/users/alice/../../../elsewhere/secret-link/x"

    def resolve(path: str) -> Path:
        raise AssertionError(f"{path} was looked up")

    monkeypatch.setattr(model_dirs, "canonical", resolve)
    with pytest.raises(PermissionDenied) as refused:
        dirs.place(spec(given), None, "alice", JOB, ALICE)
    assert repr(given) in refused.value.message and "/etc" not in refused.value.message


def test_an_owners_directory_is_made_once_and_again_before_a_launch_if_it_went(
    dirs: ModelDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit into a directory already made touches no disk (it runs on the event loop); a
    launch makes it again, with its mode, if it was removed since."""
    assert dirs.needs_disk(spec(), None, "alice")  # the first submit makes it
    placed = dirs.place(spec(), None, "alice", JOB, ALICE)
    assert not dirs.needs_disk(spec(), None, "alice")
    assert dirs.needs_disk(spec(), None, "bob")  # another owner's is not made yet
    assert dirs.needs_disk(spec(str(dirs.root / "users" / "alice" / "run")), None, "alice")
    made = dirs.root / "users" / "alice"

    def no_disk(*args: object, **kwargs: object) -> None:
        raise AssertionError("touched the disk")

    with monkeypatch.context() as patch:
        patch.setattr(Path, "mkdir", no_disk)
        patch.setattr(Path, "stat", no_disk)
        second = dirs.place(spec(), None, "alice", "wsjob-modeldirs00002", ALICE)
    assert second.model_dir == str(made / "wsjob-modeldirs00002")

    made.rmdir()
    dirs.ensure_owner_dir(Path(placed.model_dir))
    assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o750
    dirs.ensure_owner_dir(Path("/elsewhere/run"))  # not an owner's: nothing to make


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("/proc/mymodel", "No such file or directory"),  # cannot be made
        ("a-file/run1", "not a directory"),  # a file on the way
        ("a-file", "not a directory"),  # a file where the directory would be
    ],
)
def test_a_model_dir_the_replicas_could_not_make_or_write_is_refused_naming_it(
    dirs: ModelDirs, tmp_path: Path, where: str, why: str
) -> None:
    """What the replicas would fail on once systems are reserved (workers/safe_files.py) is
    refused at submit, by the same rule (appliance/safe_paths.py)."""
    (tmp_path / "a-file").write_text("not a directory\n")
    given = where if where.startswith("/") else str(tmp_path / where)
    for by in (ADMIN, None):
        with pytest.raises(
            InvalidSpec, match=f"model_dir {given} is not a directory a job may use: .*{why}"
        ) as refused:
            dirs.place(spec(given), None, "alice", JOB, by)
        assert refused.value.field == "model_dir"
    assert (tmp_path / "a-file").read_text() == "not a directory\n"


def test_a_model_dir_the_replicas_can_make_is_not_made_at_submit(
    dirs: ModelDirs, tmp_path: Path
) -> None:
    given = tmp_path / "new" / "run1"
    assert dirs.place(spec(str(given)), None, "alice", JOB, None).model_dir == str(given)
    assert not (tmp_path / "new").exists()  # the probe left nothing behind
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".appliance-probe")]


@pytest.mark.parametrize("what", ["missing", "a directory", "its directory missing"])
def test_a_checkpoint_the_replicas_could_not_read_is_refused_naming_it(
    dirs: ModelDirs, tmp_path: Path, what: str
) -> None:
    checkpoint = {
        "missing": tmp_path / "checkpoint_10.npz",
        "a directory": tmp_path,
        "its directory missing": tmp_path / "gone" / "checkpoint_10.npz",
    }[what]
    with pytest.raises(InvalidSpec, match=f"checkpoint_path {tmp_path}") as refused:
        dirs.place(spec(checkpoint=str(checkpoint)), str(checkpoint), "alice", JOB, ADMIN)
    assert refused.value.field == "checkpoint_path"


@pytest.mark.parametrize("content", [b"", b"garbage, not an archive\n", b"\x80\x04pickled"])
def test_a_checkpoint_that_is_no_npz_is_refused_at_submit_naming_it(
    dirs: ModelDirs, tmp_path: Path, content: bytes
) -> None:
    """A file that is not an .npz (a zip archive) at all failed the job's chief once systems
    were reserved, with numpy's advice to load it with allow_pickle (#32)."""
    checkpoint = tmp_path / "checkpoint_10.npz"
    checkpoint.write_bytes(content)
    with pytest.raises(InvalidSpec, match=f"checkpoint_path {checkpoint} is not an .npz") as no:
        dirs.place(spec(checkpoint=str(checkpoint)), str(checkpoint), "alice", JOB, ADMIN)
    assert no.value.field == "checkpoint_path" and "pickle" not in no.value.message
    checkpoint.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: one of ours is read then
    dirs.place(spec(checkpoint=str(checkpoint)), str(checkpoint), "alice", JOB, ADMIN)


def test_a_checkpoint_a_job_depended_on_may_write_is_not_looked_for(
    dirs: ModelDirs, tmp_path: Path
) -> None:
    later = str(tmp_path / "first" / "checkpoint_10.npz")
    then = validate_spec(
        params_yaml={"model": {"name": "fc_mnist"}, "runconfig": {"checkpoint_path": later}},
        num_csx=1, num_steps=5, depends_on=["wsjob-0123456789abcd"],
    )  # fmt: skip
    assert checkpoint_path_of(dirs.place(then, later, "alice", JOB, None)) == later


def test_paths_are_not_checked_for_a_backend_whose_replicas_write_none(tmp_path: Path) -> None:
    simulated = ModelDirs(tmp_path / "root", check_paths=False)
    assert simulated.place(spec("/proc/mymodel"), None, "alice", JOB, None).model_dir == (
        "/proc/mymodel"
    )
