"""A job id that is not one is refused naming `job_id`, with the id echoed bounded: a 5,000-
character id once made the refusal itself too large for gRPC's trailers (csctl printed
"Stream removed" instead of the one line)."""

from __future__ import annotations

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.services.job_controls import check_job_id


def test_a_huge_bad_id_is_refused_in_a_short_line() -> None:
    with pytest.raises(InvalidSpec) as refused:
        check_job_id("é" * 5000)
    assert refused.value.field == "job_id" and len(refused.value.message) < 200
    check_job_id("wsjob-0a1b2c3d4e5f6g_7")  # an array's task is a job id
