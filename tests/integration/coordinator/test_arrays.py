"""Job arrays and sweeps on a real coordinator with the simulated backend, through every door:
a sweep submitted with the client becomes its grid's tasks at once, the %N cap honoured by
admission (the others wait with ArrayTaskLimit), `csctl get array`, gRPC's GetArray and REST's
/api/v1/arrays/{id} show each task's overrides; hold, release, cancel and set-priority act on
the array or a task; bad input and an array over the queued-jobs limit are refused whole,
nothing stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from appliance.client import ApplianceClient
from appliance.domain.errors import InvalidSpec, LimitExceeded, NotFound
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL, Priority
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, wait_until

PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [8]},
    "optimizer": {"learning_rate": 0.1},
    "runconfig": {"seed": "${array_task_id}"},
}
PLAIN = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}  # no ${array_task_id}: not an array
FOREVER = {SIM_STEP_SECONDS_LABEL: "1"}  # with a million steps: until cancelled
SWEEP = {"optimizer.learning_rate": "1e-3,3e-3,1e-2", "train_input.batch_size": "64,128"}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningCoordinator]:
    (tmp_path / "limits.yaml").write_text("defaults: {queued_jobs: 8}\n")
    coordinator = RunningCoordinator(
        tmp_path / "data", backend="sim", sim_step_seconds=0.0,
        limits_file=tmp_path / "limits.yaml",
    ).start()  # fmt: skip
    try:
        yield coordinator
    finally:
        coordinator.stop()


def csctl(running: RunningCoordinator, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--server", running.address, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_sweep_runs_its_grid_within_its_cap_and_every_door_shows_it(
    running: RunningCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    with ApplianceClient(running.address) as client:
        first = client.submit(
            params=PARAMS, num_csx=1, num_steps=1_000_000, labels=FOREVER, sweep=SWEEP,
            array="%2",
        )  # fmt: skip
        array_id = first.array_id
        assert first.id == f"{array_id}_0"
        view = client.array(array_id)
        assert [t.index for t in view.tasks] == list(range(6)) and view.cap == 2
        assert view.tasks[5].overrides == {
            "optimizer.learning_rate": "1e-2",
            "train_input.batch_size": "128",
        }
        params = yaml.safe_load(client.get_job(f"{array_id}_5").spec.params_yaml)
        assert params["optimizer"]["learning_rate"] == 0.01
        assert params["train_input"]["batch_size"] == 128 and params["runconfig"]["seed"] == 5

        def phases() -> list[Phase]:
            return [t.phase for t in client.array(array_id).tasks]

        wait_until(lambda: phases().count(Phase.RUNNING) == 2, 30, "two tasks running")
        wait_until(
            lambda: all(
                t.reason_code == ReasonCode.ARRAY_TASK_LIMIT.value
                for t in client.array(array_id).tasks
                if t.phase is Phase.QUEUED
            ),
            30,
            "the others waiting for the cap",
        )
        assert phases().count(Phase.QUEUED) == 4  # never more than the cap

        table = csctl(running, "get", "array", array_id).splitlines()
        assert table[0] == f"array {array_id} of {view.user}: 6 tasks, at most 2 at once"
        assert table[1].split()[:4] == ["INDEX", "JOB", "OVERRIDES", "PHASE"]
        assert len(table) == 8 and "ArrayTaskLimit" in table[-1]
        document = json.loads(csctl(running, "get", "array", array_id, "-o", "json"))
        assert [t["index"] for t in document["tasks"]] == list(range(6))
        rest = httpx.get(
            f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/arrays/{array_id}",
            verify=False,
        )
        assert rest.status_code == 200, rest.text
        assert rest.json()["tasks"][3]["overrides"]["optimizer.learning_rate"] == "3e-3"

        # Listings: the queued tasks as one row (squeue's), the running ones as themselves.
        # (Admitted in queue order: same priority and submit time, then by id.)
        running_ids = {t.job_id for t in client.array(array_id).tasks if t.phase is Phase.RUNNING}
        assert running_ids == {f"{array_id}_0", f"{array_id}_1"}
        collapsed = f"{array_id}_[2-5%2]"
        names = [line.split()[0] for line in csctl(running, "get", "jobs").splitlines()[1:]]
        assert set(names) == running_ids | {collapsed}
        expanded = csctl(running, "get", "jobs", "--expand", "--array", array_id)
        assert len(expanded.splitlines()) == 7
        assert len(client.list_jobs(array=array_id)) == 6
        rest_list = httpx.get(
            f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs", verify=False
        ).json()["jobs"]
        assert {j["id"] for j in rest_list} == running_ids | {collapsed}
        assert rest_list[0]["array"]["array_id"] == array_id

        # Hold and release the whole array (scontrol hold <array>): its queued tasks are
        # held in their places, the running ones go on; release lets them take them again.
        said = csctl(running, "hold", "job", array_id)
        assert said == f"4 of the 6 tasks of array {array_id} held\n", said
        queued = [t for t in client.array(array_id).tasks if t.phase is Phase.QUEUED]
        assert [t.reason_code for t in queued] == [ReasonCode.HELD_USER.value] * 4
        assert phases().count(Phase.RUNNING) == 2
        assert not client.hold_job(array_id).changed  # held already: nothing to do
        released = client.release_job(array_id)
        assert released.changed and released.message.startswith("4 of the 6 tasks")
        assert all(client.get_job(t.job_id).hold is None for t in client.array(array_id).tasks)

        # A task alone, then the whole array.
        client.set_priority(array_id, Priority.P1)
        assert {client.get_job(t.job_id).spec.priority for t in view.tasks} == {Priority.P1}
        assert client.cancel_job(f"{array_id}_4").changed
        assert client.get_job(f"{array_id}_4").phase is Phase.CANCELLED
        said = csctl(running, "cancel", "job", array_id)
        assert said == f"5 of the 6 tasks of array {array_id} cancelled\n", said
        wait_until(
            lambda: set(phases()) == {Phase.CANCELLED}, 30, "every task of the array cancelled"
        )
        usage = json.loads(csctl(running, "get", "usage", "--by", "array", "-o", "json"))
        by_array = {row["key"]: row for row in usage["rows"]}
        assert by_array[array_id]["cancelled"] == 6 and by_array[array_id]["system_hours"] > 0


def test_bad_arrays_and_sweeps_are_refused_whole_and_nothing_is_stored(
    running: RunningCoordinator,
) -> None:
    with ApplianceClient(running.address, detach=True) as client:
        bad: list[tuple[dict[str, object], str]] = [
            ({"array": "0-1000000"}, "array"),
            ({"array": "0-" + "9" * 300}, "array"),
            ({"sweep": {f"model.k{i}": "1,2,3,4,5,6,7,8,9,10" for i in range(4)}}, "sweep"),
            ({"sweep": {"optimizer.learning_rate": "1e-3,fast"}}, "sweep"),
            ({"sweep": {"optimizer.learning_rat": "1e-3"}}, "sweep"),
        ]
        for more, field in bad:
            with pytest.raises(InvalidSpec) as info:
                client.submit(params=PARAMS, num_csx=1, num_steps=5, **more)
            assert info.value.field == field and "\n" not in info.value.message
        with pytest.raises(LimitExceeded) as limited:
            client.submit(params=PARAMS, num_csx=1, num_steps=5, array="0-8")
        assert "this submit makes 9 more" in limited.value.message
        assert client.list_jobs(all=True) == []
        rest = httpx.Client(
            base_url=f"https://127.0.0.1:{running.coordinator.http_port}", verify=False
        )
        grid = {f"model.k{i}": "1,2,3,4,5,6,7,8,9,10" for i in range(4)}  # 10,000 points
        body = {"params": PARAMS, "num_csx": 1, "num_steps": 5, "sweep": grid}
        refused = rest.post("/api/v1/jobs", json=body)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "sweep"
        body = {**body, "sweep": {"optimizer.learning_rate": "0.1,0.2"}, "array": "%1"}
        made = rest.post("/api/v1/jobs", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["array"]["index"] == 0 and made.json()["array"]["cap"] == 1
        rest.close()
        assert len(client.list_jobs(all=True)) == 2  # 9 tasks, 8 allowed: none made
        array_id = client.submit(params=PARAMS, num_csx=1, num_steps=5, array="0-5").array_id
        assert len(client.list_jobs(all=True)) == 8
        wait_until(  # the limit counts jobs waiting: these end at once (no step time)
            lambda: all(t.phase.terminal for t in client.array(array_id).tasks), 30, "the tasks"
        )
        # Dependencies name tasks; an array's id is said to be one.
        with pytest.raises(InvalidSpec) as info:
            client.submit(params=PLAIN, num_csx=1, num_steps=5, depends_on=array_id)
        assert info.value.field == "depends_on" and f"{array_id}_0" in info.value.message
        after = client.submit(params=PLAIN, num_csx=1, num_steps=5, depends_on=f"{array_id}_3")
        wait_until(lambda: after.status.phase is Phase.SUCCEEDED, 30, "after the task it names")
        # Reading an array: an id that is none, or a task's, is refused naming array_id.
        for bad, error in ((f"{array_id}_3", InvalidSpec), ("wsjob-nosucharrayxxx", NotFound)):
            with pytest.raises(error) as refused:
                client.array(bad)
            assert refused.value.field == "array_id"
        missing = httpx.get(
            f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/arrays/wsjob-nosucharrayxxx",
            verify=False,
        )
        assert missing.status_code == 404 and missing.json()["error"]["field"] == "array_id"
