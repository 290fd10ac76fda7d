"""`csctl get job` and the job's document (REST's too) say its execution mode: pipelined or
weight streaming, as its params chose; a list view, without params, says nothing."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import validate_spec
from appliance.server.rest.models import job_out
from csctl.job_tables import job_detail_table
from csctl.render import job_document


def job(runconfig: dict[str, str]) -> Job:
    params = {"model": {"name": "fc_mnist"}, "runconfig": runconfig}
    spec = validate_spec(params_yaml=params, num_csx=1, num_steps=1)
    return Job(id="wsjob-abcdefghijklmn", user="u", spec=spec, phase=Phase.QUEUED,
               created_at=1.0, updated_at=1.0)  # fmt: skip


@pytest.mark.parametrize(
    ("runconfig", "strategy", "said"),
    [({"execution_strategy": "pipeline"}, "pipeline", "EXECUTION: pipelined (one CS-2"),
     ({"execution_strategy": "weight_streaming"}, "weight_streaming", "EXECUTION: weight str"),
     ({}, "weight_streaming", "EXECUTION: weight streaming (MemoryX holds the model")],
)  # fmt: skip
def test_a_job_says_its_execution_mode(
    runconfig: dict[str, str], strategy: str, said: str
) -> None:
    one = job(runconfig)
    assert said in job_detail_table(one, now=2.0)
    assert job_document(one, with_params=True)["execution_strategy"] == strategy
    assert job_out(one).execution_strategy == strategy


def test_a_list_view_without_params_says_no_mode() -> None:
    summary = job({"execution_strategy": "pipeline"})
    summary = dataclasses.replace(summary, spec=dataclasses.replace(summary.spec, params_yaml=""))
    assert job_out(summary).execution_strategy == ""
    assert "EXECUTION" not in job_detail_table(summary, now=2.0)
