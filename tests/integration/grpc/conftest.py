"""The unit tier's `ctx` (a Context over a real SQLite store) for the gRPC tests beside it."""

from tests.unit.conftest import clock, ctx

__all__ = ["clock", "ctx"]
