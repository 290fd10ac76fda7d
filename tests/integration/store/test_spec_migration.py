"""Migration 0010 (the spec as one JSON document) on a store the old code wrote: every job reads
back equal, field by field, and nothing that hangs off a job is lost, on SQLite and PostgreSQL.

The rows are inserted as the code before 0010 wrote them (store/jobs.py create_jobs at a7be362:
one column per spec field), into a schema upgraded to 0009.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, func, select, text

from appliance.domain.dependencies import Condition, Dependency
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec, Mode, Priority
from appliance.store.engine import alembic_config, make_engine, migrate
from appliance.store.jobs import JobStore
from appliance.store.tables import JobDependencyRow, JobEventRow, JobLabelRow

PARAMS = "model:\n  name: fc_mnist\n"
PLAN = {"model_bytes": 1024, "groups": [["chief", 1, 0], ["cs2", 1, 1]]}

# (id, priority, mode, num_csx, num_steps, model_dir, labels, max_restarts, preemptible, queue,
# phase)
OLD_JOBS = [
    ("wsjob-aaaaaaaaaaaaaa", 2, "train", 1, 100, "", {}, None, True, "default", "QUEUED"),
    ("wsjob-bbbbbbbbbbbbbb", 0, "eval", 4, 10**9, "/models/b", {"team": "nlp", "a.b/c": "d"},
     3, False, "research", "RUNNING"),
    ("wsjob-cccccccccccccc", 3, "train_and_eval", 2, 7, "/m/c", {"empty": ""}, 0, True,
     "default", "SUCCEEDED"),
    ("wsjob-dddddddddddddd", 1, "compile", 1, 1, "/m/d", {"x": "y"}, 100, False, "nlp",
     "QUEUED"),
]  # fmt: skip
DEPENDS = ("wsjob-dddddddddddddd", "wsjob-cccccccccccccc", "afterany")


@pytest.fixture
def old_store(store_url: str) -> Iterator[Engine]:
    """A store at revision 0009 holding OLD_JOBS as the old code wrote them."""
    engine = make_engine(store_url)
    command.upgrade(alembic_config(engine), "0009")
    with engine.begin() as conn:
        for (job_id, priority, mode, num_csx, num_steps, model_dir, labels, max_restarts,
             preemptible, queue, phase) in OLD_JOBS:  # fmt: skip
            conn.execute(
                text(
                    "INSERT INTO jobs (id, \"user\", phase, priority, mode, num_csx, num_steps, "
                    "model_dir, params_yaml, labels, plan, reason, pending_reason, systems, "
                    "created_at, updated_at, started_at, finished_at, progress, lease_seconds, "
                    "lease_expires_at, lease_holder, groups, max_restarts, preemptible, queue, "
                    "account_group, queued_at) VALUES (:id, 'alice', :phase, :priority, :mode, "
                    ":num_csx, :num_steps, :model_dir, :params, :labels, :plan, '', "
                    "'waiting for the scheduler', '', 1000.0, 1000.0, 0.0, 0.0, '{}', 0.0, 0.0, "
                    "'', '[\"ml\"]', :max_restarts, :preemptible, :queue, 'ml', 1000.0)"
                ),
                {
                    "id": job_id, "phase": phase, "priority": priority, "mode": mode,
                    "num_csx": num_csx, "num_steps": num_steps, "model_dir": model_dir,
                    "params": PARAMS, "labels": json.dumps(labels), "plan": json.dumps(PLAN),
                    "max_restarts": max_restarts, "preemptible": preemptible, "queue": queue,
                },
            )  # fmt: skip
            for key, value in labels.items():
                conn.execute(
                    text("INSERT INTO job_labels (job_id, key, value) VALUES (:j, :k, :v)"),
                    {"j": job_id, "k": key, "v": value},
                )
            conn.execute(
                text(
                    "INSERT INTO job_events (job_id, time, from_phase, to_phase, reason) "
                    "VALUES (:j, 1000.0, NULL, 'QUEUED', 'submitted by alice')"
                ),
                {"j": job_id},
            )
        conn.execute(
            text(
                "INSERT INTO job_dependencies (job_id, depends_on, condition) VALUES (:a, :b, :c)"
            ),
            dict(zip("abc", DEPENDS, strict=True)),
        )
    yield engine
    engine.dispose()


def _expected(row: tuple[Any, ...]) -> JobSpec:
    (job_id, priority, mode, num_csx, num_steps, model_dir, labels, max_restarts, preemptible,
     queue, _) = row  # fmt: skip
    depends = (Dependency(DEPENDS[1], Condition(DEPENDS[2])),) if job_id == DEPENDS[0] else ()
    return JobSpec(
        params_yaml=PARAMS, num_csx=num_csx, num_steps=num_steps, mode=Mode(mode),
        labels=labels, priority=Priority(priority), model_dir=model_dir,
        max_restarts=max_restarts, preemptible=preemptible, queue=queue, depends_on=depends,
    )  # fmt: skip


def test_every_job_reads_back_equal_after_the_upgrade(old_store: Engine) -> None:
    migrate(old_store)
    store = JobStore(old_store)
    for row in OLD_JOBS:
        job = store.get_job(row[0])
        expected = _expected(row)
        for name in JobSpec.__dataclass_fields__:
            assert getattr(job.spec, name) == getattr(expected, name), (row[0], name)
        assert (job.user, job.phase, job.groups) == ("alice", Phase(row[-1]), ("ml",))
    # Summaries (the listing's read) and full views agree on everything but the full view's own.
    listed = {job.id: job for job in store.job_summaries([row[0] for row in OLD_JOBS])}
    for row in OLD_JOBS:
        assert _summary_spec(listed[row[0]]) == _summary_spec(store.get_job(row[0]))
    with old_store.connect() as conn:  # nothing that hangs off a job went with the old columns
        assert conn.scalar(select(func.count()).select_from(JobEventRow)) == len(OLD_JOBS)
        assert conn.scalar(select(func.count()).select_from(JobLabelRow)) == 4
        assert conn.scalar(select(func.count()).select_from(JobDependencyRow)) == 1
    assert store.get_job(DEPENDS[1]).dependents == (DEPENDS[0],)


def test_a_migrated_store_takes_new_jobs_and_downgrades(old_store: Engine) -> None:
    migrate(old_store)
    command.downgrade(alembic_config(old_store), "0009")
    with old_store.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, priority, mode, num_csx, num_steps, model_dir, max_restarts, "
                "preemptible FROM jobs ORDER BY id"
            )
        ).all()
    assert [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7])) for r in rows] == [
        (*row[:6], row[7], row[8]) for row in OLD_JOBS
    ]
    migrate(old_store)  # and up again
    assert JobStore(old_store).get_job(OLD_JOBS[1][0]).spec == _expected(OLD_JOBS[1])


def _summary_spec(job: Job) -> JobSpec:
    return dataclasses.replace(job.spec, params_yaml="", depends_on=())
