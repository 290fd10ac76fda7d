"""A job's data sets are its user's: with authentication on, a user reads only their own,
their groups' or the admins' shared data sets (APPLIANCE_DATA_DIRS_ALLOWED), by any spelling
of the path; with it off, any directory the coordinator sees. A data_dir that is no directory
is refused at submit, naming the field, through both doors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.client import ApplianceClient
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator


def params(train: str, evaluate: str | None = None) -> dict[str, object]:
    sections: dict[str, object] = {
        "model": {"name": "fc_mnist", "hidden_sizes": [8]},
        "train_input": {"data_dir": train},
    }
    if evaluate is not None:
        sections["eval_input"] = {"data_dir": evaluate}
    return sections


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, dict[str, str], Path]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {user: create_token(tokens_file, user, [group], admin=False)
              for user, group in (("alice", "nlp"), ("bob", "cv"))}  # fmt: skip
    shared = [tmp_path / "datasets" / "a", tmp_path / "datasets" / "b"]
    for where in (*shared, tmp_path / "elsewhere"):
        where.mkdir(parents=True)
    running = RunningCoordinator(
        tmp_path / "data", auth_tokens_file=tokens_file,
        data_dirs_allowed=f"{shared[0]}, {shared[1]}",
    ).start()  # fmt: skip
    root = running.settings.data_dir.resolve() / "model_dirs"
    for where in ("users/alice/mnist", "users/bob/mnist", "groups/nlp/owt"):
        (root / where).mkdir(parents=True)
    try:
        yield running, tokens, root
    finally:
        running.stop()


def test_a_user_reads_only_her_own_her_groups_and_the_shared_data_sets(
    secured: tuple[RunningCoordinator, dict[str, str], Path], tmp_path: Path
) -> None:
    running, tokens, root = secured
    with ApplianceClient(running.address, token=tokens["alice"], detach=True) as alice:
        for train in (
            str(root / "users/bob/mnist"),
            f"{root}/users/alice/../bob/mnist",
            str(tmp_path / "elsewhere"),
            str(tmp_path / "datasets"),  # above the shared ones
        ):
            with pytest.raises(PermissionDenied, match="is not yours") as refused:
                alice.submit(params=params(train), num_csx=1, num_steps=2)
            assert refused.value.field == "train_input.data_dir"
        own = str(root / "users/alice/mnist")
        with pytest.raises(PermissionDenied) as refused:
            alice.submit(
                params=params(own, str(root / "users/bob/mnist")),
                num_csx=1, num_steps=2, mode="train_and_eval",  # the mode that reads both
            )  # fmt: skip
        assert refused.value.field == "eval_input.data_dir"
        with pytest.raises(InvalidSpec, match="does not exist") as missing:
            alice.submit(params=params(f"{root}/users/alice/absent"), num_csx=1, num_steps=2)
        assert missing.value.field == "train_input.data_dir"
        assert alice.list_jobs(all=True) == []  # nothing stored

        for train in (own, str(root / "groups/nlp/owt"), str(tmp_path / "datasets" / "b")):
            job = alice.submit(params=params(train), num_csx=1, num_steps=2)
            job.cancel()
            assert job.status.spec.params["train_input"]["data_dir"] == train

    # The REST door says the same: 403 naming the field.
    body = {"params": params(str(root / "users/bob/mnist")), "num_csx": 1, "num_steps": 2}
    answer = httpx.post(
        f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs",
        json=body,
        headers={"Authorization": f"Bearer {tokens['alice']}"},
        timeout=30,
    )
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["field"] == "train_input.data_dir"


def test_without_authentication_any_directory_but_nothing_else(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "a-file").write_text("no data set")
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        with ApplianceClient(running.address, detach=True) as client:
            for where, says in (("absent", "does not exist"), ("a-file", "not a directory")):
                with pytest.raises(InvalidSpec, match=says) as refused:
                    client.submit(params=params(str(tmp_path / where)), num_csx=1, num_steps=2)
                assert refused.value.field == "train_input.data_dir"
            job = client.submit(params=params(str(elsewhere)), num_csx=1, num_steps=2)
            job.cancel()
            assert job.status.spec.params["train_input"]["data_dir"] == str(elsewhere)
    finally:
        running.stop()
