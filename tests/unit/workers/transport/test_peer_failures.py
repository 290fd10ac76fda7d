"""What a chief says when a peer's call fails: a step that outlasts the step timeout names the
limit and what to change (a Model Zoo GPT-2 small config on the emulation ended in a bare
`DEADLINE_EXCEEDED: Deadline Exceeded`)."""

from __future__ import annotations

import grpc

from appliance.workers.topology import PeerAddress
from appliance.workers.transport.peer_calls import _failure

CS2 = PeerAddress(name="cs2-0", role="cs2", index=0, address="127.0.0.1:1")


def error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def test_a_step_past_the_step_timeout_names_the_limit_and_what_to_change() -> None:
    failure = _failure(CS2, "step 0", error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline"), 30)
    assert failure.reason.startswith(
        "step 0 failed on cs2-0: no answer within the step timeout (30 s, DEADLINE_EXCEEDED)"
    )
    assert "smaller model" in failure.reason and "batch_size" in failure.reason


def test_other_failures_keep_the_code_and_details() -> None:
    failure = _failure(CS2, "step 3", error(grpc.StatusCode.UNAVAILABLE, "connection reset"), 30)
    assert failure.reason == "step 3 failed on cs2-0: UNAVAILABLE: connection reset"
