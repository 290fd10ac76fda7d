"""Thin gRPC servicers: convert, call a service, convert back."""
