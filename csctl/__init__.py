"""csctl: the appliance's command line (see `csctl --help`)."""

import os

# gRPC's core logs a failed TLS handshake on stderr at INFO before the call fails; csctl says
# what went wrong in one line of its own (protocol/errors.py), so only gRPC's errors show.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
