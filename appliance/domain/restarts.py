"""The restart policy: which failures a job runs again after, and how often.

A failure is retryable when a replica was killed by a signal (exit code 128 + N: the OOM
killer, a lost node, an operator's kill -9), was lost with its pod (evicted, deleted, its
Kubernetes node gone) or ended with an exit code the admins list
(APPLIANCE_RESTART_EXIT_CODES). A plain failure (exit 1: a params or model error such as a
non-finite loss), an end nobody can explain and a cancel never are: running again would fail
again, or undo what someone asked for. So is a system an admin sets to error or maintenance
under a job. A job may be restarted `max_restarts` times (its spec's, else the cluster's);
each restart is a new attempt resuming from its newest checkpoint. Preemptions are not
failures: they never count against `max_restarts`.

A replica that ends because another replica of its job failed (the chief whose call to a
killed CS-2 broke) exits with EXIT_PEER_FAILED: a consequence, not a cause. The coordinator
waits a moment for the cause (the CS-2's own end, exit 137) to be reported and judges the
failure by that; only when no cause comes is the consequence itself the reason.
"""

from __future__ import annotations

from collections.abc import Collection

from appliance.domain.reasons import Reason, ReasonCode, resume_point, said

# The exit code of a replica that ended because a replica it called failed (workers and
# coordinator agree on it here).
EXIT_PEER_FAILED = 4


def retryable(exit_code: int | None, extra_codes: Collection[int], lost: bool = False) -> bool:
    """Whether a replica ending with `exit_code` (None: unknown) may be retried; `lost`: its pod
    or node was taken from it (evicted, deleted, node gone), which always may."""
    if lost:
        return True
    if exit_code is None:
        return False
    return exit_code > 128 or exit_code in extra_codes


def restart_or_fail(
    failure: Reason, limit: int, used: int, newest_checkpoint: int | None, *, exact: bool = True
) -> tuple[Reason | None, Reason | None]:
    """After a retryable `failure`, with `used` of `limit` restarts spent: (the reason to
    requeue the job with, None) while restarts are left, else (None, the reason to fail it:
    `failure`'s code, saying no restarts are left). `newest_checkpoint` None: the job is
    asked for a checkpoint first, resumed from that. Not `exact`: the gang still trains
    until it is stopped, and may write a later one."""
    if used >= limit:
        return None, failure.but(exhausted=(used, limit)) if limit else failure
    if newest_checkpoint is None:
        where = "the checkpoint it writes now"
    elif not exact:
        where = (
            f"its newest checkpoint (step {newest_checkpoint} or later)"
            if newest_checkpoint
            else "its newest checkpoint if it writes one first, else the start"
        )
    else:
        where = resume_point(newest_checkpoint)
    requeue = said(
        ReasonCode.RESTARTING, failure=failure.message, cause=failure.code_text, resume=where,
        restart=used + 1, limit=limit,
    )  # fmt: skip
    return requeue, None


def restate_resume_point(reason: Reason, was: int, newest: int) -> Reason:
    """`reason`, made by restart_or_fail when the newest checkpoint was `was`, naming `newest`
    instead: one the chief reported after the decision, before its gang was stopped."""
    if newest <= was or reason.code is not ReasonCode.RESTARTING:
        return reason
    return reason.but(resume=resume_point(newest))


def restart_limit(spec_limit: int | None, cluster_default: int) -> int:
    """The job's max_restarts, else the cluster's (APPLIANCE_RESTART_MAX_RESTARTS)."""
    return cluster_default if spec_limit is None else spec_limit
