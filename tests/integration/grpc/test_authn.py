"""The one authentication interceptor, on a real grpc.aio server on an ephemeral port: each
call sees its own caller, however calls interleave, and a service nobody declared is shut."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from appliance.domain.auth import Principal
from appliance.server.auth import Authenticator, create_token, digest
from appliance.server.grpc.authn import CLUSTER, Authentication, caller


class Gate:
    """Holds calls until `expected` of them are inside, then lets them all go."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.inside = 0
        self.open = asyncio.Event()

    async def hold(self) -> None:
        self.inside += 1
        if self.inside == self.expected:
            self.open.set()
        await self.open.wait()


def _whoami_service(name: str, gate: Gate) -> Any:
    async def whoami(request: bytes, context: Any) -> bytes:
        before = caller()
        await gate.hold()  # every other call authenticates meanwhile
        assert caller() == before
        return (before.user if before else "<off>").encode()

    handler = grpc.unary_unary_rpc_method_handler(whoami)
    return grpc.method_handlers_generic_handler(name, {"WhoAmI": handler})


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[grpc.aio.Channel, dict[str, str]]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {user: create_token(tokens_file, user, [], admin=False) for user in ("ann", "ben")}
    principals = {digest(t): Principal(user=u) for u, t in tokens.items()}
    gate = Gate(expected=3)
    server = grpc.aio.server(interceptors=[Authentication(Authenticator(principals), None)])
    server.add_generic_rpc_handlers(
        (
            _whoami_service(CLUSTER, gate),
            _whoami_service("appliance.v1.Undeclared", gate),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel, tokens
    finally:
        await server.stop(None)


async def test_each_call_sees_its_own_caller_while_calls_interleave(
    served: tuple[grpc.aio.Channel, dict[str, str]],
) -> None:
    channel, tokens = served
    whoami = channel.unary_unary(f"/{CLUSTER}/WhoAmI")
    calls = [
        whoami(b"", metadata=(("authorization", f"Bearer {tokens[user]}"),), timeout=10)
        for user in ("ann", "ben", "ann")
    ]
    assert [await call for call in calls] == [b"ann", b"ben", b"ann"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await whoami(b"", timeout=10)  # refused before the gate: no call waits on it
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "authentication is required" in (refused.value.details() or "")


async def test_a_service_nobody_declared_is_refused(
    served: tuple[grpc.aio.Channel, dict[str, str]],
) -> None:
    channel, tokens = served
    undeclared = channel.unary_unary("/appliance.v1.Undeclared/WhoAmI")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await undeclared(b"", metadata=(("authorization", f"Bearer {tokens['ann']}"),), timeout=10)
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED


def test_outside_an_authenticated_call_there_is_no_caller_not_even_anonymous() -> None:
    # A servicer served without the interceptor must fail, not run as if authentication
    # were off (caller() None).
    with pytest.raises(RuntimeError, match="Authentication interceptor"):
        caller()
