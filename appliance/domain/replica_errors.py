"""A failed replica's last error line: what a job's reason (and so the launcher's last line)
says after "replica chief-0 exited with exit code 1", e.g. `UnsafePath: /proc/mymodel is not a
directory a job may use: No such file or directory`.

The replica program says it on its way out (workers/__main__.py): one line, last on its
stderr, and into the file its backend gave it (ERROR_FILE_ENV: the local backend's
`pids/<replica>.error`, a pod's termination message). A replica that could not (a crash before
its own handler) ended with a traceback or a usage error, whose last line says why: the
backends fall back to the last line of its log, as Kubernetes' FallbackToLogsOnError does, but
only for a replica that ended by itself with a failure (`says_why`): the last log line of one
killed by a signal is whatever it was doing. Whatever a replica wrote is untrusted by the
coordinator: `error_line` keeps one line, escapes its control characters and bounds it.
"""

from __future__ import annotations

# Where the replica program writes its last error line (a path; the backend sets it).
ERROR_FILE_ENV = "APPLIANCE_ERROR_FILE"
# At most this many characters of it are kept.
MAX_ERROR_LINE = 300
# At most this much of a file or log is read to find it.
MAX_ERROR_READ = 16 * 1024


def says_why(exit_code: int | None) -> bool:
    """Whether a replica that ended with `exit_code` has a last error line to look for: it
    failed by itself (1 to 127), rather than succeeding or being killed by a signal."""
    return exit_code is not None and 0 < exit_code < 128


def error_line(text: str) -> str:
    """The last non-blank line of `text`, control characters escaped (`\\x1b`), at most
    MAX_ERROR_LINE characters (the rest cut, marked `…`)."""
    lines = [line.strip() for line in text[-MAX_ERROR_READ:].splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    escaped = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
        for c in last[: MAX_ERROR_LINE + 1]
    )
    if len(escaped) > MAX_ERROR_LINE:
        return escaped[: MAX_ERROR_LINE - 1] + "…"
    return escaped


def error_of(exc: BaseException) -> str:
    """The last error line of an exception a replica failed with: `UnsafePath: <message>`."""
    message = " ".join(str(exc).split())  # a message of several lines, on one
    return error_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
