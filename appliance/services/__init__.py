"""Use cases shared by every door (gRPC, REST) and by the loops. The doors call these for
everything they do; every phase change goes through Context (services/context.py)."""
