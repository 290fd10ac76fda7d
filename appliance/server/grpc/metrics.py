"""Every gRPC call counted by method and status code, and timed, in one interceptor: the
outermost, so calls refused by the standby or authentication interceptors count too.

Only methods the server has are labelled (a call to an unknown method gets no handler and no
series): a caller cannot make series by sending names. Each method's wrapped handler and its
series are made once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

from appliance.server.grpc.errors import Ctx
from appliance.server.grpc.wrapping import HandlerWrapping, observed
from appliance.services.metrics import Metrics

OK = "OK"


class CallMetrics(HandlerWrapping):
    def __init__(self, metrics: Metrics, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._metrics = metrics
        self._clock = clock

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        return _Measured(self._metrics, self._clock, method, handler).handler()


class _Measured:
    """One method's series, and its handler wrapped to count and time each call."""

    def __init__(
        self,
        metrics: Metrics,
        clock: Callable[[], float],
        method: str,
        handler: grpc.RpcMethodHandler,
    ) -> None:
        service, _, name = method.lstrip("/").partition("/")
        streams = (handler.request_streaming, handler.response_streaming)
        kind = {
            (False, False): "unary",
            (False, True): "server_stream",
            (True, False): "client_stream",
            (True, True): "bidi_stream",
        }[streams]
        labels = {"grpc_type": kind, "grpc_service": service, "grpc_method": name}
        self._handled: Counter = metrics.grpc_handled
        self._labels = labels
        self._codes: dict[str, Any] = {OK: metrics.grpc_handled.labels(**labels, grpc_code=OK)}
        self._latency: Histogram = metrics.grpc_latency.labels(**labels)
        self._clock = clock
        self._handler = handler

    def handler(self) -> grpc.RpcMethodHandler:
        return observed(self._handler, self._clock, self._ended)

    def _ended(
        self, started: float, request: Any, context: Ctx, failure: BaseException | None, _: Any
    ) -> None:
        self._done(started, context, failure)

    def _done(self, started: float, context: Ctx, failure: BaseException | None) -> None:
        self._latency.observe(self._clock() - started)
        code = call_code(context, failure)
        counter = self._codes.get(code)
        if counter is None:  # one of the 17 status codes: a bounded set of series
            counter = self._codes[code] = self._handled.labels(**self._labels, grpc_code=code)
        counter.inc()


def call_code(context: Ctx, failure: BaseException | None) -> str:
    """The call's status code: as set (an abort sets it); else OK, CANCELLED when the caller
    went away (its task is cancelled), or UNKNOWN for a method that raised without setting
    one (gRPC answers those with UNKNOWN)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if failure is None:
        return OK
    if isinstance(failure, asyncio.CancelledError) or context.cancelled():
        return "CANCELLED"
    return "UNKNOWN"
