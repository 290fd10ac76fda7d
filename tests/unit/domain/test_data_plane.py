"""What a replica says of its data plane: the replica cuts it, the coordinator trusts none of
it (one line, every control character escaped, bounded again)."""

from __future__ import annotations

from appliance.domain.data_plane import MAX_DATA_PLANE, bounded, data_plane_line


def test_a_short_line_is_kept_as_said() -> None:
    said = "shared memory: swarmx-0, worker-0; grpc: none"
    assert bounded(said) == said == data_plane_line(said)
    assert bounded("z" * MAX_DATA_PLANE) == "z" * MAX_DATA_PLANE


def test_a_long_line_is_cut_and_marked() -> None:
    assert bounded("z" * 10_000) == "z" * (MAX_DATA_PLANE - 1) + "…"
    assert data_plane_line("z" * 10_000) == "z" * (MAX_DATA_PLANE - 1) + "…"


def test_control_and_invisible_characters_become_visible_escapes_on_one_line() -> None:
    hostile = "grpc: \x1b]0;owned\x07\nshared memory:\tall\u202eenon\r\x9b"
    line = data_plane_line(hostile)
    assert line == ("grpc: \\x1b]0;owned\\x07\\x0ashared memory:\\x09all\\u202eenon\\x0d\\x9b")
    assert line.isprintable()
    assert len(data_plane_line("\x1b" * 10_000)) == MAX_DATA_PLANE  # escapes count too
