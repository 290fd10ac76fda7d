"""The audit's reproduction: with authentication on, one user can neither write into another
user's model directory nor resume from another user's checkpoint, by any spelling of the path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.client import ApplianceClient
from appliance.domain.errors import PermissionDenied
from appliance.domain.phases import Phase
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator

PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, dict[str, str]]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {user: create_token(tokens_file, user, [group], admin=False)
              for user, group in (("alice", "nlp"), ("bob", "cv"))}  # fmt: skip
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    try:
        yield running, tokens
    finally:
        running.stop()


def test_another_users_model_dir_and_checkpoint_are_out_of_reach(
    secured: tuple[RunningCoordinator, dict[str, str]],
) -> None:
    running, tokens = secured
    root = running.settings.data_dir.resolve() / "model_dirs"
    with ApplianceClient(running.address, token=tokens["bob"], detach=True) as bob:
        params = {**PARAMS, "runconfig": {"checkpoint_steps": 2}}
        job = bob.submit(params=params, num_csx=1, num_steps=4)
        final = job.wait(timeout=120)
    assert final.phase is Phase.SUCCEEDED
    assert final.spec.model_dir == str(root / "users" / "bob" / job.id)
    checkpoint = Path(final.spec.model_dir) / "checkpoint_4.npz"
    before = hashlib.sha256(checkpoint.read_bytes()).hexdigest()

    with ApplianceClient(running.address, token=tokens["alice"], detach=True) as alice:
        for model_dir in (
            final.spec.model_dir,
            f"{root}/users/alice/../bob/{job.id}",
            f"{root}/users/alice/nonexist/../../bob",
        ):
            with pytest.raises(PermissionDenied, match="is not yours") as refused:
                alice.submit(params=PARAMS, num_csx=1, num_steps=2, model_dir=model_dir)
            assert refused.value.field == "model_dir"
        resume = {**PARAMS, "runconfig": {"checkpoint_path": str(checkpoint)}}
        with pytest.raises(PermissionDenied, match=r"checkpoint_path .* is not yours"):
            alice.submit(params=resume, num_csx=1, num_steps=2)
        assert [j.user for j in alice.list_jobs(all=True)] == ["bob"]  # nothing of hers stored

    # The REST door says the same, 403 naming the field, and stores nothing.
    body = {"params": PARAMS, "num_csx": 1, "num_steps": 2, "model_dir": final.spec.model_dir}
    answer = httpx.post(
        f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs",
        json=body,
        headers={"Authorization": f"Bearer {tokens['alice']}"},
        timeout=30,
    )
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["field"] == "model_dir"
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == before
