"""Mutual TLS between the replicas of one attempt of a job.

With the coordinator serving TLS, each replica holds a certificate and key of its own, signed
by the coordinator's CA, for its name and the job-wide name of its attempt
(domain/replica_identity.py), and the CA (APPLIANCE_REPLICA_CERT, _KEY, _CA). It serves the
data plane only to callers presenting a certificate of that CA (the handshake fails without
one), and dials each peer with its own, verifying the peer as the job-wide name. A certificate
of the same CA but of another job or attempt passes the handshake at a server, so the server
also refuses every call whose client certificate lacks the job-wide name
(job_credential.py), before the request is parsed. The job's data-plane token stays a second
factor, inside the TLS now.

Without a certificate (the coordinator runs --insecure, on loopback only) the data plane is
plaintext and the token is its only credential.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from cryptography import x509

from appliance.domain.auth import ATTEMPT_ENV
from appliance.domain.replica_identity import (
    IDENTITY_ENV,
    REPLICA_CA_ENV,
    REPLICA_CERT_ENV,
    REPLICA_KEY_ENV,
    job_tls_name,
)

# Where gRPC's auth context holds the SANs of the certificate the peer presented.
SAN_PROPERTY = "x509_subject_alternative_name"


class IdentityError(Exception):
    """The replica's certificate is missing a part or is not for its job's attempt."""


@dataclasses.dataclass(frozen=True)
class ReplicaTls:
    """This replica's certificate and key, the CA, and the name its peers must hold."""

    cert_pem: bytes
    key_pem: bytes = dataclasses.field(repr=False)
    ca_pem: bytes = b""
    peer_name: str = ""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], job_id: str) -> ReplicaTls | None:
        """The identity the coordinator gave this replica, or None when it gave none (it serves
        plaintext). Raises IdentityError for a part missing or a certificate of another
        job or attempt: one line naming the variable."""
        given = {name: environ.get(name, "") for name in IDENTITY_ENV}
        if not any(given.values()):
            return None
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise IdentityError(
                f"{', '.join(missing)} not set although {REPLICA_CERT_ENV} or another part is: "
                "replicas are started by the coordinator, which gives each its certificate"
            )
        attempt = environ.get(ATTEMPT_ENV, "0")
        name = job_tls_name(job_id, int(attempt) if attempt.isdigit() and len(attempt) < 10 else 0)
        cert = given[REPLICA_CERT_ENV].encode()
        if name not in _dns_names(cert):
            raise IdentityError(f"{REPLICA_CERT_ENV} is not a certificate for {name}")
        return cls(cert, given[REPLICA_KEY_ENV].encode(), given[REPLICA_CA_ENV].encode(), name)

    def server_credentials(self) -> grpc.ServerCredentials:
        """Serve with this certificate to callers with one of the CA only."""
        return grpc.ssl_server_credentials(
            [(self.key_pem, self.cert_pem)],
            root_certificates=self.ca_pem,
            require_client_auth=True,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Dial with this certificate, trusting the CA only."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_pem,
            private_key=self.key_pem,
            certificate_chain=self.cert_pem,
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        """A peer is verified as the job-wide name, whatever address it is dialled at."""
        return [("grpc.ssl_target_name_override", self.peer_name)]

    def is_peer(self, auth_context: Mapping[str, Sequence[bytes]]) -> bool:
        """Whether the caller's (verified) certificate is of this job's attempt."""
        return self.peer_name.encode() in auth_context.get(SAN_PROPERTY, ())


def _dns_names(cert_pem: bytes) -> list[str]:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound) as exc:
        raise IdentityError(f"{REPLICA_CERT_ENV} is not a usable certificate: {exc}") from None
    return list(sans.get_values_for_type(x509.DNSName))
