"""Use cases shared by every door (gRPC, REST) and by the loops: they call these, never the
store or the backend directly."""
