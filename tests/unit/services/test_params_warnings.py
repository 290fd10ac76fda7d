"""A submit by any door records the params' warnings as the job's events, after the submitted
one, each naming its key (#32): `csctl events`, REST and the dashboard show them."""

from __future__ import annotations

from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import validate_spec
from appliance.services.context import Context
from tests.unit.harness import job_service

WORKSHOP = (
    "model: {name: fc_mnist, hidden_sizes: [4], mixed_precision: true}\n"
    "train_input: {batch_size: 8, image_size: [1, 2, 2]}\n"
    "runconfig: {save_losses: true, model_dir: ./model_dir}\n"
)


async def test_each_params_warning_is_one_event_at_submit(ctx: Context) -> None:
    jobs = job_service(ctx)
    spec = validate_spec(params_yaml=WORKSHOP, num_csx=1, num_steps=5)  # no model_dir given

    job = await jobs.submit(spec, "alice")

    events = await jobs.events(job.id)
    assert [(e.from_phase, e.to_phase) for e in events] == [(None, Phase.QUEUED)] * 4
    assert [e.reason_code for e in events] == [ReasonCode.SUBMITTED] + [
        ReasonCode.PARAMS_WARNING
    ] * 3
    assert [e.reason.split(" is accepted")[0] for e in events[1:]] == [
        "params: model.mixed_precision",
        "params: train_input.image_size",
        "params: runconfig.model_dir",  # this door did not resolve it: the job says where not
    ]


async def test_params_without_unused_keys_record_only_the_submit(ctx: Context) -> None:
    jobs = job_service(ctx)
    spec = validate_spec(params_yaml="model: {name: fc_mnist}\n", num_csx=1, num_steps=5)

    job = await jobs.submit(spec, "alice")

    assert [e.reason_code for e in await jobs.events(job.id)] == [ReasonCode.SUBMITTED]
