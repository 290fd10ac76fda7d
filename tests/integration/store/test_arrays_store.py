"""An array's tasks in the store, on every backend (`store_url`: SQLite, PostgreSQL): created
in one transaction (all or nothing), read back by array id in index order with their place in
the array, and the caps admission reads (tasks holding resources, for arrays with one queued)."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.domain.arrays import TaskOf, task_id
from appliance.domain.errors import InvalidSpec
from appliance.domain.inventory import default_pool
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.store.jobs import JobStore, NewJob
from tests.integration.store.driving import T0, drive, make_spec, submit

ARRAY = "wsjob-arrayarrayarr"


def tasks(count: int, cap: int = 0, queue: str = "default") -> list[NewJob]:
    spec = dataclasses.replace(make_spec(), queue=queue)
    plan = plan_replicas(spec, default_pool())
    return [
        NewJob(
            task_id(ARRAY, i),
            "alice",
            spec,
            plan,
            array=TaskOf(ARRAY, i, cap, {"optimizer.learning_rate": str(i)}),
        )
        for i in range(count)
    ]


def test_an_arrays_tasks_are_created_together_and_read_back_in_order(store: JobStore) -> None:
    made = store.create_jobs(list(reversed(tasks(3, cap=2))), T0)
    assert {job.id for job in made} == {f"{ARRAY}_{i}" for i in range(3)}
    submit(store, "wsjob-plainplainplain")  # no array: not among its tasks
    found = store.array_tasks(ARRAY)
    assert [job.id for job in found] == [f"{ARRAY}_0", f"{ARRAY}_1", f"{ARRAY}_2"]
    assert found[2].array == TaskOf(ARRAY, 2, 2, {"optimizer.learning_rate": "2"})
    assert store.get_job(f"{ARRAY}_1").array == found[1].array
    assert store.get_job("wsjob-plainplainplain").array is None
    assert store.array_tasks("wsjob-nosucharrayxx") == []


def test_a_refused_array_stores_none_of_its_tasks(store: JobStore) -> None:
    with pytest.raises(InvalidSpec):
        store.create_jobs(tasks(4, queue="nosuchqueue"), T0)
    assert store.array_tasks(ARRAY) == []
    assert store.existing_jobs([f"{ARRAY}_{i}" for i in range(4)]) == set()


def test_array_caps_count_the_tasks_holding_resources(store: JobStore) -> None:
    store.create_jobs(tasks(4, cap=2), T0)
    assert store.array_caps() == {ARRAY: (2, 0)}
    drive(store, f"{ARRAY}_0", Phase.RUNNING)
    drive(store, f"{ARRAY}_1", Phase.SCHEDULED)
    drive(store, f"{ARRAY}_2", Phase.CANCELLED)
    assert store.array_caps() == {ARRAY: (2, 2)}
    drive(store, f"{ARRAY}_3", Phase.CANCELLED)  # none queued: admission needs nothing
    assert store.array_caps() == {}
