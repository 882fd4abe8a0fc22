"""grpcio's C core logs a peer's GOAWAY at INFO on stderr when a loopback receiver stops:
keep the test log to errors."""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
