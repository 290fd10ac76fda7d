"""The data plane's transport: tensors on the wire, the calls between replicas, SwarmX's relay and
sums."""
