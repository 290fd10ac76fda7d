"""`appliance token create/list/revoke/rotate`: a token is printed once and never again; the
list shows ids, principals and times but no token and no digest; a bad --ttl or an unknown id
is one line, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import main


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["token", *args])
    return result.exit_code, result.stdout, result.stderr


def test_create_list_rotate_revoke(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.yaml")
    code, alice, said = _run("create", "--user", "alice", "--group", "nlp", "--file", path)
    assert code == 0 and "expires at" in said
    code, root, _ = _run("create", "--user", "root", "--admin", "--ttl", "never", "--file", path)
    assert code == 0
    digests = [e["sha256"] for e in yaml.safe_load(Path(path).read_text())["tokens"]]

    code, listed, _ = _run("list", "--file", path)
    assert code == 0
    lines = listed.splitlines()
    assert lines[0].split() == ["ID", "USER", "GROUPS", "ADMIN", "CREATED", "EXPIRES", "STATE"]
    assert lines[1].split()[1:4] == ["alice", "nlp", "no"] and lines[1].endswith("valid")
    assert lines[2].split()[1:4] == ["root", "-", "yes"] and "never" in lines[2]
    for secret in [alice.strip(), root.strip(), *digests]:
        assert secret not in listed and secret[:16] not in listed

    alice_id = lines[1].split()[0]
    code, rotated, said = _run("rotate", alice_id, "--file", path)
    assert code == 0 and f"replaces {alice_id} (which ends now)" in said
    assert rotated.strip() not in (alice.strip(), "")
    code, listed, _ = _run("list", "--file", path)
    assert alice_id not in listed and listed.count("alice") == 1

    root_id = lines[2].split()[0]
    assert _run("revoke", root_id, "--file", path)[:2] == (0, f"token {root_id} of root revoked\n")
    assert "root" not in _run("list", "--file", path)[1]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["create", "--user", "a", "--ttl", "5 years"], "Invalid value for --ttl: '5 years'"),
        (["create", "--user", "a", "--ttl", "9999d"], "over ten years"),
        (["create", "--user", "a", "--ttl", "x" * 100_000], "is not a duration"),
        (["create", "--user", "a b"], "Invalid value for --user"),
        (["create", "--user", "a", "--group", "../x"], "Invalid value for --group"),
        (["revoke", "0badc0de"], "no token with id '0badc0de'"),
        (["rotate", "0badc0de"], "no token with id '0badc0de'"),
        (["revoke", "x" * 10_000], "not a token id"),
    ],
)
def test_hostile_input_is_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    path = tmp_path / "tokens.yaml"
    _run("create", "--user", "alice", "--file", str(path))
    before = path.read_bytes()
    code, _, err = _run(*args, "--file", str(path))
    assert code != 0 and said in err
    assert "Traceback" not in err and len(err.strip().splitlines()[-1]) < 300
    assert path.read_bytes() == before
