"""A job's comment (Slurm's --comment), end to end through every form the spec takes: its
validation, the client, the launcher, the wire, REST in and out, csctl's document and table."""

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
from appliance.domain.spec import MAX_COMMENT, validate_spec
from appliance.domain.spec_document import spec_from_document, stored_values
from appliance.protocol.spec_pb import spec_from_pb, spec_to_pb
from appliance.server.rest.models import job_out
from appliance.server.rest.requests import JobSubmitIn
from csctl.job_tables import job_detail_table
from csctl.render import job_document

PARAMS = "model:\n  name: fc_mnist\n"


def test_a_comment_is_one_line_of_visible_text_of_at_most_256_characters() -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, comment="  sweep 7 ")
    assert spec.comment == "sweep 7"
    assert validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1).comment == ""
    for bad, said in (("x" * (MAX_COMMENT + 1), "at most 256"), ("a\x1b[2Jb", "one line")):
        with pytest.raises(InvalidSpec, match=said) as raised:
            validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, comment=bad)
        assert raised.value.field == "comment"


def test_the_comment_goes_through_the_wire_the_store_and_rest() -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, comment="sweep 7")
    assert spec_from_pb(spec_to_pb(spec)).comment == "sweep 7"
    assert stored_values({"num_csx": 1, "num_steps": 1})["comment"] == ""  # an older row
    body = JobSubmitIn.model_validate(
        {"params": PARAMS, "num_csx": 1, "num_steps": 1, "comment": "sweep 7"}
    )
    assert validate_spec(**body.spec_fields()) == spec
    with pytest.raises(ValueError, match="256"):
        JobSubmitIn.model_validate({"params": PARAMS, "num_csx": 1, "num_steps": 1,
                                    "comment": "x" * 257})  # fmt: skip
    job = Job(id="wsjob-abcdefghijklmn", user="u", spec=spec, phase=Phase.QUEUED,
              created_at=1.0, updated_at=1.0)  # fmt: skip
    assert job_out(job).spec.comment == "sweep 7"  # type: ignore[attr-defined]
    assert job_document(job, with_params=True)["spec"]["comment"] == "sweep 7"
    assert spec_from_document(job_out(job).model_dump(mode="json")["spec"]) == spec
    assert "COMMENT: sweep 7" in job_detail_table(job, now=2.0)
    assert "COMMENT" not in job_detail_table(
        dataclasses.replace(job, spec=dataclasses.replace(spec, comment="")), now=2.0
    )


def test_the_launcher_and_the_client_take_a_comment(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    client.submit(params=str(params_file), num_csx=1, num_steps=5, comment="sweep 7")
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    assert request.spec.comment == "sweep 7"
    with pytest.raises(TypeError, match="comet"):
        client.submit(params=str(params_file), num_csx=1, num_steps=5, comet="typo")

    seen: list[LaunchOptions] = []

    @click.command()
    @launch_options
    def command(**given: object) -> None:
        seen.append(LaunchOptions.of(given))

    result = CliRunner().invoke(command, ["-p", "p.yaml", "--comment", "sweep 7"])
    assert result.exit_code == 0, result.output
    assert seen[0].spec_options == {"comment": "sweep 7"}
    assert "--comment" in CliRunner().invoke(command, ["--help"]).output
    CliRunner().invoke(command, ["-p", "p.yaml"])
    assert seen[1].spec_options == {}  # not given: the spec's default
