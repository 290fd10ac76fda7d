"""A failed replica's last error line: one line, escaped, bounded, only for a failure."""

from __future__ import annotations

import pytest

from appliance.domain.reasons import ReasonCode, said
from appliance.domain.replica_errors import MAX_ERROR_LINE, error_line, error_of, says_why


def test_the_last_non_blank_line_is_kept_with_its_control_characters_escaped() -> None:
    text = "Traceback ...\n  File x\nValueError: bad \x1b[2Jthing\u202e\r\n\n  \n"
    assert error_line(text) == "ValueError: bad \\x1b[2Jthing\\u202e"
    assert error_line("") == error_line("\n \n") == ""


def test_a_long_line_is_cut_and_says_so() -> None:
    line = error_line("y" * 100_000)
    assert len(line) == MAX_ERROR_LINE and line.endswith("…")
    escaped = error_line("\x00" * 1000)  # escaping cannot make it longer either
    assert len(escaped) == MAX_ERROR_LINE and escaped.startswith("\\x00\\x00")


def test_an_exception_says_its_type_and_its_message_on_one_line() -> None:
    assert error_of(ValueError("checkpoint x\ncannot be read")) == (
        "ValueError: checkpoint x cannot be read"
    )
    assert error_of(KeyError()) == "KeyError"


@pytest.mark.parametrize(("code", "says"), [(None, False), (0, False), (1, True), (4, True),
                                            (127, True), (137, False), (143, False)])  # fmt: skip
def test_only_a_replica_that_failed_by_itself_has_a_line_to_look_for(
    code: int | None, says: bool
) -> None:
    assert says_why(code) is says


def test_a_replica_failure_ends_with_its_last_error_line() -> None:
    reason = said(
        ReasonCode.REPLICA_FAILED, replica="chief-0", exit_code=1,
        error="UnsafePath: /proc/mymodel is not a directory a job may use",
    )  # fmt: skip
    assert reason.message == (
        "replica chief-0 exited with exit code 1: UnsafePath: /proc/mymodel is not a "
        "directory a job may use"
    )
    with_message = said(
        ReasonCode.REPLICA_FAILED, replica="cs2-0", exit_code=137, message="OOMKilled"
    )
    assert with_message.message == "replica cs2-0 exited with exit code 137 (OOMKilled)"
