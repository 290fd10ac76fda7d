"""Strings from the server (another user's cancel reason, a replica's message, a label) reach
the terminal as visible escapes, never as control sequences: piped or not, in every format."""

from __future__ import annotations

import json

from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance.domain.phases import Phase
from csctl.render import printable

# Retitles the terminal (OSC 0 ... BEL), then paints red and moves the cursor home.
HOSTILE = "done\x1b]0;owned\x07 \x1b[31mred\x1b[H\r\x9b2J"


def _clean(text: str) -> None:
    assert not any(ch in text for ch in "\x1b\x07\r\x9b"), repr(text)


def test_printable_shows_every_control_character_and_keeps_lines() -> None:
    assert printable(HOSTILE) == ("done\\x1b]0;owned\\x07 \\x1b[31mred\\x1b[H\\x0d\\x9b2J")
    assert printable("a\tb\nc") == "a\tb\nc"


def test_a_hostile_reason_prints_escaped_in_tables_and_events(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    job = cluster.service.add_job(phase=Phase.RUNNING)
    cluster.service.transition(job.id, Phase.CANCELLED, HOSTILE)

    for args in (("get", "job", job.id), ("events", job.id), ("get", "jobs", "-a", "-o", "wide")):
        result = csctl(*args)
        assert result.exit_code == 0, result.output
        _clean(result.stdout)
    assert "\\x1b]0;owned\\x07" in csctl("events", job.id).stdout
    detail = csctl("get", "job", job.id, "-o", "yaml").stdout
    _clean(detail)
    as_json = csctl("get", "job", job.id, "-o", "json").stdout
    _clean(as_json)
    assert json.loads(as_json)["reason"] == HOSTILE  # the data itself is kept whole
