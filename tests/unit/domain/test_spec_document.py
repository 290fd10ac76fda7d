"""One spec document (#31): JobSpec's fields, described once, give the plain document, the
protobuf conversion, the REST bodies and the one job document csctl and REST both send."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from appliance._proto.v1 import cluster_pb2
from appliance.domain.dependencies import Condition, Dependency
from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Attempt, Job, Lease, Progress, Replica, ReplicaPhase
from appliance.domain.job_document import job_document
from appliance.domain.phases import Phase
from appliance.domain.plan import Role
from appliance.domain.spec import JobSpec, Mode, Priority, validate_spec
from appliance.domain.spec_document import (
    spec_document,
    spec_fields,
    spec_from_document,
    spec_values,
    stored_document,
    stored_values,
)
from appliance.protocol.spec_pb import spec_from_pb, spec_to_pb
from appliance.server.rest.models import SpecOut, job_out
from appliance.server.rest.requests import JobSubmitIn
from csctl.render import job_document as csctl_document

PARAMS = "model:\n  name: fc_mnist\n"


def full_spec() -> JobSpec:
    """A spec with every field away from its default."""
    return validate_spec(
        params_yaml=PARAMS, num_csx=3, num_steps=77, mode=Mode.EVAL,
        labels={"team": "nlp", "example.com/run": "7"}, priority=Priority.P0,
        model_dir="/models/x", max_restarts=0, preemptible=False, queue="research",
        depends_on=["afterany:wsjob-abcdefghijklmn"],
    )  # fmt: skip


def full_job() -> Job:
    return Job(
        id="wsjob-abcdefghijklm0", user="alice", spec=full_spec(), phase=Phase.RUNNING,
        created_at=1_700_000_000.0, updated_at=1_700_000_100.5, reason="r", pending_reason="p",
        queue_position=0, systems=("cs2-01",), started_at=1_700_000_050.0,
        progress=Progress(step=5, num_steps=77, loss=1.5, reported_at=1_700_000_090.0,
                          checkpoint_step=4, eval_loss=0.5),
        replicas=(Replica("wsjob-abcdefghijklm0", "chief-0", Role.CHIEF, 0, "mgmt",
                          ReplicaPhase.READY, exit_code=None),),
        lease=Lease(30.0, 1_700_000_130.0, "host:1"), attempt=2, restarts=1,
        attempts=(Attempt(1, 1.0, 2.0, 3.0, ("cs2-02",), "preempted", Phase.QUEUED, 0),),
        dependents=("wsjob-zzzzzzzzzzzzzz",), estimated_start=0.0,
    )  # fmt: skip


def test_every_field_is_described_once_and_round_trips_through_every_form() -> None:
    spec = full_spec()
    assert spec_from_document(spec_document(spec)) == spec
    assert spec_from_pb(spec_to_pb(spec)) == spec
    stored = stored_values(stored_document(spec))
    assert (
        JobSpec(**stored, **{n: getattr(spec, n) for n in spec_values(spec) if n not in stored})
        == spec
    )
    names = [f.name for f in spec_fields()]
    assert names == [f.name for f in dataclasses.fields(JobSpec)]
    assert set(names) <= set(cluster_pb2.JobSpec.DESCRIPTOR.fields_by_name)
    assert set(names) <= set(SpecOut.model_fields)
    assert set(names) - {"params_yaml"} <= set(JobSubmitIn.model_fields)
    assert all(f.info.doc for f in spec_fields())


def test_documents_are_forward_compatible() -> None:
    document = spec_document(full_spec())
    newer = {**document, "from_a_newer_writer": {"x": 1}}
    assert spec_from_document(newer) == full_spec()
    older = {"params_yaml": PARAMS, "num_csx": 1, "num_steps": 2}
    assert spec_from_document(older) == JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2)
    assert stored_values({"v": 99, "num_csx": 1, "num_steps": 2, "new": 1})["mode"] is Mode.TRAIN
    with pytest.raises(InvalidSpec) as raised:
        spec_from_document({**document, "mode": "dance"})
    assert raised.value.field == "mode"


def test_spec_from_pb_reads_zero_and_unset_as_defaults_and_refuses_unknown_numbers() -> None:
    empty = spec_from_pb(cluster_pb2.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=1))
    assert empty == JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=1)
    assert empty.preemptible is True and empty.max_restarts is None and empty.queue == "default"
    p0 = spec_from_pb(spec_to_pb(dataclasses.replace(empty, priority=Priority.P0)))
    assert p0.priority is Priority.P0  # 1 on the wire: not the default
    for field, said in (("mode", "is not a known mode"), ("priority", "is not one of P0-P3")):
        with pytest.raises(InvalidSpec, match=f"{field} 42 {said}") as raised:
            spec_from_pb(cluster_pb2.JobSpec(num_csx=1, **{field: 42}))  # type: ignore[arg-type]
        assert raised.value.field == field
    deps = spec_from_pb(cluster_pb2.JobSpec(depends_on=["afterany:wsjob-abcdefghijklmn"]))
    assert deps.depends_on == (Dependency("wsjob-abcdefghijklmn", Condition.AFTERANY),)


def test_rest_and_csctl_send_the_same_document() -> None:
    job = full_job()
    document: dict[str, Any] = job_document(job)
    assert job_out(job).model_dump(mode="json") == document
    summary = dataclasses.replace(job, spec=dataclasses.replace(job.spec, params_yaml=""))
    listed = csctl_document(summary, with_params=False)
    assert listed.pop("name") == listed["id"]  # the deprecated alias, for one release
    assert listed == job_out(summary).model_dump(mode="json")
    full = csctl_document(job, with_params=True)
    assert full["spec"]["params"] == {"model": {"name": "fc_mnist"}}
    assert "params_yaml" not in full["spec"]


def test_rest_submit_body_takes_every_spec_field() -> None:
    body = JobSubmitIn.model_validate(
        {"params": PARAMS, "num_csx": 3, "num_steps": 77, "mode": "eval",
         "labels": {"team": "nlp", "example.com/run": "7"}, "priority": "p0",
         "model_dir": "/models/x", "max_restarts": 0, "preemptible": False, "queue": "research",
         "depends_on": ["afterany:wsjob-abcdefghijklmn"]}
    )  # fmt: skip
    assert validate_spec(**body.spec_fields()) == full_spec()
