"""Credentials of a job's replicas towards the coordinator, when authentication is on.

A user's bearer token must not be what a replica presents (replicas outlive the client and run
where users cannot see), and ReplicaControl must not be open to anyone who can reach the port:
with it, a caller could report progress for any job or read any job's peers and params. Each
attempt of a job gets its own token instead: HMAC-SHA256 of the job id and attempt under a
secret that only the coordinator holds (APPLIANCE_REPLICA_TOKEN_KEY_FILE, default
`<data dir>/replica-token.key`, mode 0600, made on first use). Nothing is stored per job, and a
restarted coordinator recognises the replicas it adopts. A replica of an attempt that is over
holds a token of that attempt only.

The replicas of a job also hold its data-plane token, authentication on or off: every call
between them carries it and a call without it is refused (workers/transport/job_credential.py),
so no other process can shut a job down, read its weights or push gradients into it. It is
derived under the same key from the job id and the attempt, and is not the replica token:
nothing that only calls the data plane can act towards the coordinator.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from appliance.domain.auth import DATAPLANE_TOKEN_ENV, REPLICA_TOKEN_ENV

MIN_KEY_BYTES = 32


class ReplicaTokens:
    """Issues and checks the per-job replica tokens, and issues the data-plane tokens.
    `control` says whether replicas need a replica token (authentication is on)."""

    def __init__(self, key: bytes, control: bool = True) -> None:
        self._key = key
        self.control = control

    @classmethod
    def from_key_file(cls, path: Path, control: bool = True) -> ReplicaTokens:
        """The tokens under the key in `path`, which is made (0600) if missing. A restarted
        coordinator must find the same key, or the replicas it adopts are strangers: on
        Kubernetes the chart mounts it from a Secret. Raises ValueError for a short key."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            _create_key(path)
        key = path.read_bytes()
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(
                f"the replica token key {path} holds {len(key)} bytes, fewer than "
                f"{MIN_KEY_BYTES}: remove it (a new one is made) or give a longer one"
            )
        return cls(key, control)

    def token_for(self, job_id: str, attempt: int) -> str:
        """The replica token of one attempt of a job: a replica of another attempt (one left
        over from before a requeue) cannot act for this one."""
        message = f"replica\0{job_id}\0{attempt}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def valid(self, job_id: str, attempt: int, token: str) -> bool:
        return hmac.compare_digest(self.token_for(job_id, attempt), token)

    def dataplane_token(self, job_id: str, attempt: int = 1) -> str:
        """The token the replicas of one attempt of a job present to each other."""
        message = f"dataplane\0{job_id}\0{attempt}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def environment(self, job_id: str, attempt: int) -> dict[str, str]:
        """The secret part of a replica's environment: its job's tokens for `attempt`."""
        env = {DATAPLANE_TOKEN_ENV: self.dataplane_token(job_id, attempt)}
        if self.control:
            env[REPLICA_TOKEN_ENV] = self.token_for(job_id, attempt)
        return env


def _create_key(path: Path) -> None:
    """Write a new key whole, then link it into place: a crash never leaves a short key, and
    of two coordinators racing the first link wins."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(secrets.token_bytes(MIN_KEY_BYTES))
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(partial, path)
    finally:
        partial.unlink(missing_ok=True)
