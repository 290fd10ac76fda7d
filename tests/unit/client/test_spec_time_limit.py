"""A job's time limit (Slurm's --time) through every form the spec takes: the client, the
launcher's --time, the wire, REST in and out, csctl's document and table; and a queue's
limits through csctl queue set and csctl get queues."""

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
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.queues import QueueStatus, Quota, validate_queue
from appliance.domain.spec import validate_spec
from appliance.domain.spec_document import spec_from_document, stored_values
from appliance.protocol.convert import phase_from_pb, phase_to_pb
from appliance.protocol.queues import queue_from_pb, queue_to_pb
from appliance.protocol.spec_pb import spec_from_pb, spec_to_pb
from appliance.server.rest.models import job_out
from appliance.server.rest.queues import QueueIn, queue_out
from appliance.server.rest.requests import JobSubmitIn
from csctl.job_tables import job_detail_table
from csctl.queues import queues_table
from csctl.render import job_document

PARAMS = "model:\n  name: fc_mnist\n"


def test_the_time_limit_goes_through_the_wire_the_store_and_rest() -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, time_limit="2:00:00")
    assert spec_from_pb(spec_to_pb(spec)).time_limit == "02:00:00"
    assert stored_values({"num_csx": 1, "num_steps": 1})["time_limit"] == ""  # an older row
    body = JobSubmitIn.model_validate(
        {"params": PARAMS, "num_csx": 1, "num_steps": 1, "time_limit": "2:00:00"}
    )
    assert validate_spec(**body.spec_fields()) == spec
    with pytest.raises(ValueError, match="32"):
        JobSubmitIn.model_validate({"params": PARAMS, "num_csx": 1, "num_steps": 1,
                                    "time_limit": "1" * 33})  # fmt: skip
    job = Job(id="wsjob-abcdefghijklmn", user="u", spec=spec, phase=Phase.TIMEOUT,
              created_at=1.0, updated_at=1.0)  # fmt: skip
    assert job_out(job).spec.time_limit == "02:00:00"  # type: ignore[attr-defined]
    assert job_out(job).phase is Phase.TIMEOUT
    assert job_document(job, with_params=True)["spec"]["time_limit"] == "02:00:00"
    assert spec_from_document(job_out(job).model_dump(mode="json")["spec"]) == spec
    assert "TIME LIMIT: 02:00:00" in job_detail_table(job, now=2.0)
    assert "TIMEOUT" in job_detail_table(job, now=2.0)
    assert "TIME LIMIT" not in job_detail_table(
        dataclasses.replace(job, spec=dataclasses.replace(spec, time_limit="")), now=2.0
    )
    assert phase_from_pb(phase_to_pb(Phase.TIMEOUT)) is Phase.TIMEOUT
    assert int(phase_to_pb(Phase.TIMEOUT)) == 8


def test_the_launcher_and_the_client_take_a_time_limit(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    client.submit(params=str(params_file), num_csx=1, num_steps=5, time_limit="1-00")
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    assert request.spec.time_limit == "1-00:00:00"

    seen: list[LaunchOptions] = []

    @click.command()
    @launch_options
    def command(**given: object) -> None:
        seen.append(LaunchOptions.of(given))

    result = CliRunner().invoke(command, ["-p", "p.yaml", "--time", "30"])
    assert result.exit_code == 0, result.output
    assert seen[0].spec_options == {"time_limit": "30"}
    assert "--time" in CliRunner().invoke(command, ["--help"]).output


def test_a_queues_limits_on_the_wire_rest_and_csctl() -> None:
    spec = validate_queue(name="nlp", default_time_limit="2:00:00", max_time_limit="1-00")
    status = QueueStatus(spec=spec, quota=Quota(1, 0))
    back = queue_from_pb(queue_to_pb(status)).spec
    assert (back.default_time_limit, back.max_time_limit) == (7200, 86400)
    assert (queue_out(status).default_time_limit, queue_out(status).max_time_limit) == (
        7200, 86400
    )  # fmt: skip
    assert QueueIn.model_validate({"max_time_limit": "2:00"}).max_time_limit == "2:00"
    with pytest.raises(ValueError):
        QueueIn.model_validate({"max_time_limit": "1" * 40})
    table = queues_table([status])
    header, row = table.splitlines()
    assert header.split()[-2:] == ["DEFAULT-TIME", "MAX-TIME"]
    assert row.split()[-2:] == ["02:00:00", "1-00:00:00"]
    plain = QueueStatus(spec=validate_queue(name="nlp"), quota=Quota(1, 0))
    assert queues_table([plain]).splitlines()[1].rstrip().endswith("-")
