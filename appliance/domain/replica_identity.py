"""The names a replica's certificate is for, and the environment that carries it.

With TLS on (the coordinator does not run --insecure), every replica gets a certificate and key
of its own from the coordinator's CA, for one attempt of one job (server/replica_identity.py),
and the replicas of that attempt talk to each other over mutual TLS only
(workers/transport/replica_tls.py). The certificate's names say whose it is:

- `<replica>.<job id>.a<attempt>.replica.appliance`: this replica (its common name is the
  replica's name);
- `<job id>.a<attempt>.replica.appliance`: the job-wide name every replica of the attempt
  holds. A replica verifies a peer's server certificate as this name and refuses a caller
  whose client certificate does not hold it, so a replica of another job or attempt, though
  its certificate is of the same CA, cannot connect either way.

Names under `.appliance`, a top-level domain nobody resolves: they are identities, never dialled
(replicas dial each other's addresses and check the name with a target name override).
"""

from __future__ import annotations

# The replica's certificate and key (PEM) and the CA (PEM) it verifies its peers by.
REPLICA_CERT_ENV = "APPLIANCE_REPLICA_CERT"
REPLICA_KEY_ENV = "APPLIANCE_REPLICA_KEY"
REPLICA_CA_ENV = "APPLIANCE_REPLICA_CA"
IDENTITY_ENV = (REPLICA_CERT_ENV, REPLICA_KEY_ENV, REPLICA_CA_ENV)
# How long a replica's certificate is valid: an attempt running longer than this cannot open
# new data-plane connections once it ends (those open go on); a requeue issues new ones.
REPLICA_CERT_DAYS = 30
_DOMAIN = "replica.appliance"


def job_tls_name(job_id: str, attempt: int) -> str:
    """The name every replica of one attempt of a job holds, and checks its peers hold."""
    return f"{job_id}.a{attempt}.{_DOMAIN}"


def replica_tls_name(job_id: str, attempt: int, replica: str) -> str:
    """The name of one replica of one attempt of a job."""
    return f"{replica}.{job_tls_name(job_id, attempt)}"
