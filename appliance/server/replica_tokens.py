"""Credentials of a job's replicas towards the coordinator, when authentication is on.

A user's bearer token must not be what a replica presents (replicas outlive the client and run
where users cannot see), and ReplicaControl must not be open to anyone who can reach the port:
with it, a caller could report progress for any job or read any job's peers and params. Each
job's replicas get their own token instead: HMAC-SHA256 of the job id under a secret that only
the coordinator holds (`<data dir>/replica-token.key`, mode 0600, made on first use). Nothing is
stored per job, and a restarted coordinator recognises the replicas it adopts.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "replica-token.key"


class ReplicaTokens:
    """Issues and checks the per-job replica tokens."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> ReplicaTokens:
        """The tokens of this coordinator's data dir; the key is created on first use."""
        path = data_dir / KEY_FILE
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return cls(path.read_bytes())
        key = secrets.token_bytes(32)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key)
        return cls(key)

    def token_for(self, job_id: str) -> str:
        return hmac.new(self._key, job_id.encode(), hashlib.sha256).hexdigest()

    def valid(self, job_id: str, token: str) -> bool:
        return hmac.compare_digest(self.token_for(job_id), token)
