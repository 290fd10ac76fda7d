"""Use cases shared by every door (gRPC now, REST later): thin servicers call these."""
