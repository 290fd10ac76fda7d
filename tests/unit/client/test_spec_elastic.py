"""An elastic job's range through every form the spec takes: the client's `num_csx="2-8"`, the
launcher's `--num_csx 2-8`, the wire (JobSpec.num_csx_min, field 100), REST in and out, the
stored document, and csctl's CSX column; a bad range refused before anything is sent."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient
from appliance.client.launch_options import LaunchOptions, launch_options
from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import validate_spec
from appliance.domain.spec_document import spec_from_document, stored_values
from appliance.protocol.spec_pb import spec_from_pb, spec_to_pb
from appliance.server.rest.models import job_out
from appliance.server.rest.requests import JobSubmitIn
from csctl.job_tables import jobs_table

PARAMS = "model:\n  name: fc_mnist\n"


def test_the_range_goes_through_the_wire_the_store_rest_and_csctl() -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=8, num_steps=1, num_csx_min=2)
    assert spec_from_pb(spec_to_pb(spec)) == spec
    assert cluster_pb2.JobSpec.DESCRIPTOR.fields_by_name["num_csx_min"].number == 100
    assert stored_values({"num_csx": 1, "num_steps": 1})["num_csx_min"] == 0  # an older row
    body = JobSubmitIn.model_validate(
        {"params": PARAMS, "num_csx": 8, "num_steps": 1, "num_csx_min": 2}
    )
    assert validate_spec(**body.spec_fields()) == spec
    job = Job(id="wsjob-abcdefghijklmn", user="u", spec=spec, phase=Phase.RUNNING,
              created_at=1.0, updated_at=1.0, systems=("cs2-01", "cs2-02", "cs2-03"))  # fmt: skip
    assert spec_from_document(job_out(job).model_dump(mode="json")["spec"]) == spec
    table = jobs_table([job, dataclasses.replace(job, systems=(), phase=Phase.QUEUED)], now=2.0)
    assert "3 (2-8)" in table.lines[1] and "- (2-8)" in table.lines[2]


def test_the_client_and_the_launcher_take_a_range(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    client.submit(params=str(params_file), num_csx="2-8", num_steps=5)
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    assert (request.spec.num_csx, request.spec.num_csx_min) == (8, 2)
    with pytest.raises(InvalidSpec) as refused:
        client.submit(params=str(params_file), num_csx="8-2", num_steps=5)
    assert refused.value.field == "num_csx_min"
    assert len(cluster.service.requests_of("SubmitJob")) == 1  # nothing sent

    seen: list[LaunchOptions] = []

    @click.command()
    @launch_options
    def command(**given: object) -> None:
        seen.append(LaunchOptions.of(given))

    result = CliRunner().invoke(command, ["-p", "p.yaml", "--num_csx", "2-8"])
    assert result.exit_code == 0, result.output
    assert seen[0].num_csx == "2-8"
    assert "MIN-MAX" in CliRunner().invoke(command, ["--help"]).output
