"""Each replica's certificate for the data plane, signed by the coordinator's CA.

Issued per (job, attempt, replica) when the backend starts the replica (and, on Kubernetes,
put in the job's credentials Secret, each pod taking its own): the replica's name as common
name, its own and the job-wide name of the attempt as SANs (domain/replica_identity.py),
usable as server and client, valid REPLICA_CERT_DAYS. The CA is the one that signs the doors'
certificate, or with an operator's --tls-cert/--tls-key the coordinator's own CA in its CA dir
all the same (replicas only need one that their coordinator holds). Nothing is kept: the names
are derived, a new key is made each time.
"""

from __future__ import annotations

from collections.abc import Mapping

from appliance.domain.replica_identity import (
    REPLICA_CA_ENV,
    REPLICA_CERT_DAYS,
    REPLICA_CERT_ENV,
    REPLICA_KEY_ENV,
    job_tls_name,
    replica_tls_name,
)
from appliance.server.pki import CertificateAuthority


class ReplicaIdentities:
    """Issues the replicas' certificates from `ca`."""

    def __init__(self, ca: CertificateAuthority, days: int = REPLICA_CERT_DAYS) -> None:
        self.ca = ca
        self.days = days

    def environment(self, job_id: str, attempt: int, replica: str) -> Mapping[str, str]:
        """A replica's certificate, key and the CA that signs its peers', as its environment."""
        names = [replica_tls_name(job_id, attempt, replica), job_tls_name(job_id, attempt)]
        issued = self.ca.issue(replica, names, days=self.days, server=True, client=True)
        return {
            REPLICA_CERT_ENV: issued.cert_pem.decode(),
            REPLICA_KEY_ENV: issued.key_pem.decode(),
            REPLICA_CA_ENV: self.ca.cert_pem.decode(),
        }
