"""REST doors (FastAPI): thin routers over the services with the same operations and rules as
the gRPC door, plus health, readiness and metrics."""
