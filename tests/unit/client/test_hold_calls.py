"""Holds from the user node (#37): `--hold` at submit (the launcher, the client, the wire) and
the client's hold, release, suspend and resume calls."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient
from appliance.client.launch_options import LaunchOptions, launch_options
from appliance.domain.errors import InvalidSpec
from appliance.domain.holds import Hold, HoldKind
from appliance.domain.spec import validate_spec
from appliance.protocol.convert import hold_from_pb
from appliance.protocol.spec_pb import spec_from_pb, spec_to_pb
from appliance.server.rest.requests import JobSubmitIn

PARAMS = "model:\n  name: fc_mnist\n"


def test_hold_at_submit_goes_through_the_launcher_the_client_and_the_wire(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, hold=True)
    assert spec_from_pb(spec_to_pb(spec)).hold is True
    body = JobSubmitIn.model_validate(
        {"params": PARAMS, "num_csx": 1, "num_steps": 1, "hold": True}
    )
    assert validate_spec(**body.spec_fields()) == spec  # REST's submit takes it too
    with pytest.raises(InvalidSpec, match="hold must be true or false") as raised:
        validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, hold="yes")
    assert raised.value.field == "hold"
    client.submit(params=str(params_file), num_csx=1, num_steps=5, hold=True)
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest) and request.spec.hold

    seen: list[LaunchOptions] = []

    @click.command()
    @launch_options
    def command(**given: object) -> None:
        seen.append(LaunchOptions.of(given))

    assert CliRunner().invoke(command, ["-p", "p.yaml", "--hold"]).exit_code == 0
    assert seen[0].spec_options == {"hold": True}  # a flag, no value
    CliRunner().invoke(command, ["-p", "p.yaml"])
    assert seen[1].spec_options == {}  # not given: the spec's default, not held


def test_a_hold_comes_back_from_the_wire_as_it_went() -> None:
    assert hold_from_pb("", "", False) is None
    assert hold_from_pb("admin", "root", True) == Hold(HoldKind.ADMIN, "root", suspended=True)
    assert hold_from_pb("newer-kind", "root", False) == Hold(HoldKind.USER, "root")
