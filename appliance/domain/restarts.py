"""The restart policy: which failures a job runs again after, and how often.

A failure is retryable when a replica was killed by a signal (exit code 128 + N: the OOM
killer, a lost node, an operator's kill -9) or ended with an exit code the admins list
(APPLIANCE_RESTART_EXIT_CODES). A plain failure (exit 1: a params or model error such as a
non-finite loss), an end nobody can explain and a cancel never are: running again would fail
again, or undo what someone asked for. A job may be restarted `max_restarts` times (its spec's,
else the cluster's); each restart is a new attempt resuming from its newest checkpoint.
"""

from __future__ import annotations

from collections.abc import Collection


def retryable(exit_code: int | None, extra_codes: Collection[int]) -> bool:
    """Whether a replica ending with `exit_code` (None: unknown) may be retried."""
    if exit_code is None:
        return False
    return exit_code > 128 or exit_code in extra_codes


def restarts_used(attempt: int) -> int:
    """Restarts before attempt number `attempt` (the first attempt is 1)."""
    return max(0, attempt - 1)
