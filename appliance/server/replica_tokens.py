"""Credentials of a job's replicas towards the coordinator, when authentication is on.

A user's bearer token must not be what a replica presents (replicas outlive the client and run
where users cannot see), and ReplicaControl must not be open to anyone who can reach the port:
with it, a caller could report progress for any job or read any job's peers and params. Each
job's replicas get their own token instead: HMAC-SHA256 of the job id under a secret that only
the coordinator holds (`<data dir>/replica-token.key`, mode 0600, made on first use). Nothing is
stored per job, and a restarted coordinator recognises the replicas it adopts.

The replicas of a job also hold its data-plane token, authentication on or off: every call
between them carries it and a call without it is refused (workers/transport/job_credential.py),
so no other process can shut a job down, read its weights or push gradients into it. It is
derived under the same key from the job id and the attempt, and is not the replica token:
nothing that only calls the data plane can act towards the coordinator.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from appliance.domain.auth import DATAPLANE_TOKEN_ENV, REPLICA_TOKEN_ENV

KEY_FILE = "replica-token.key"


class ReplicaTokens:
    """Issues and checks the per-job replica tokens, and issues the data-plane tokens.
    `control` says whether replicas need a replica token (authentication is on)."""

    def __init__(self, key: bytes, control: bool = True) -> None:
        self._key = key
        self.control = control

    @classmethod
    def in_data_dir(cls, data_dir: Path, control: bool = True) -> ReplicaTokens:
        """The tokens of this coordinator's data dir; the key is created on first use."""
        path = data_dir / KEY_FILE
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return cls(path.read_bytes(), control)
        key = secrets.token_bytes(32)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key)
        return cls(key, control)

    def token_for(self, job_id: str) -> str:
        return hmac.new(self._key, job_id.encode(), hashlib.sha256).hexdigest()

    def valid(self, job_id: str, token: str) -> bool:
        return hmac.compare_digest(self.token_for(job_id), token)

    def dataplane_token(self, job_id: str, attempt: int = 1) -> str:
        """The token the replicas of one attempt of a job present to each other."""
        message = f"dataplane\0{job_id}\0{attempt}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def environment(self, job_id: str) -> dict[str, str]:
        """The secret part of a replica's environment: its job's tokens."""
        env = {DATAPLANE_TOKEN_ENV: self.dataplane_token(job_id)}
        if self.control:
            env[REPLICA_TOKEN_ENV] = self.token_for(job_id)
        return env
