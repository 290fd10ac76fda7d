"""The coordinator service: composition root (app.py), authentication, thin gRPC servicers
(grpc/) and REST routers (rest/) over the services."""
