"""The coordinator service: composition root, gRPC servicers (and REST routers later)."""
