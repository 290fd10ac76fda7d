"""`appliance token create/list/revoke/rotate`: a token is printed once and never again; the
list shows ids, principals and times but no token and no digest; a bad --ttl or an unknown id
is one line, not a traceback. Each change is a record of the audit log in the coordinator's
store (never a token); a change the store cannot record is refused unless --no-audit."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import main
from appliance.domain.audit import AuditQuery, Door, Outcome
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore


@pytest.fixture(autouse=True)
def no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir of its own per test (none found: the changes are made, said unrecorded)."""
    monkeypatch.setenv("APPLIANCE_DATA_DIR", str(tmp_path / "no-coordinator-ran-here"))
    monkeypatch.delenv("APPLIANCE_DATABASE_URL", raising=False)
    monkeypatch.delenv("APPLIANCE_AUDIT_FILE", raising=False)
    monkeypatch.delenv("APPLIANCE_AUDIT_LEVEL", raising=False)


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


def test_each_change_is_an_audit_record_of_the_os_user_never_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    engine = make_engine(f"sqlite:///{data / 'appliance.db'}")
    migrate(engine)
    monkeypatch.setenv("APPLIANCE_DATA_DIR", str(data))
    monkeypatch.setenv("APPLIANCE_AUDIT_FILE", str(tmp_path / "audit.jsonl"))
    path = str(tmp_path / "tokens.yaml")
    code, alice, said = _run("create", "--user", "alice", "--group", "nlp", "--file", path)
    assert code == 0 and "warning" not in said
    [entry] = yaml.safe_load(Path(path).read_text())["tokens"]
    code, rotated, _ = _run("rotate", entry["id"], "--overlap", "1h", "--file", path)
    assert code == 0
    new_id = next(e["id"] for e in yaml.safe_load(Path(path).read_text())["tokens"]
                  if e["id"] != entry["id"])  # fmt: skip
    assert _run("revoke", "0badc0de", "--file", path)[0] == 1
    assert _run("revoke", new_id, "--file", path)[0] == 0

    events = list(reversed(JobStore(engine).audit_events(AuditQuery())))
    engine.dispose()
    seen = [(e.door, e.verb, e.target, e.outcome) for e in events]
    assert seen == [
        (Door.CLI, "token-create", f"token/{entry['id']}", Outcome.ALLOWED),
        (Door.CLI, "token-rotate", f"token/{entry['id']}", Outcome.ALLOWED),
        (Door.CLI, "token-revoke", "token/0badc0de", Outcome.REFUSED),
        (Door.CLI, "token-revoke", f"token/{new_id}", Outcome.ALLOWED),
    ]
    assert {(e.user, e.source, e.admin) for e in events} == {(getpass.getuser(), "local", True)}
    assert events[0].reason.startswith("for alice (groups nlp); expires at ")
    assert f"replaced by {new_id}" in events[1].reason
    assert "no token with id '0badc0de'" in events[2].reason
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["verb"] for line in lines] == [e.verb for e in events]
    everything = "\n".join([*lines, *(json.dumps(e.document()) for e in events)])
    for secret in (alice.strip(), rotated.strip(), entry["sha256"]):
        assert secret not in everything


def test_a_change_the_store_cannot_record_is_refused_unless_no_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "appliance.db").write_bytes(b"")  # a store, but not one with an audit log
    monkeypatch.setenv("APPLIANCE_DATA_DIR", str(data))
    path = tmp_path / "tokens.yaml"
    code, out, err = _run("create", "--user", "alice", "--file", str(path))
    assert code == 1 and out == "" and not path.exists()
    assert err.startswith("Error: nothing changed: the change could not be audited (")
    assert "appliance migrate" in err and "--no-audit" in err and "Traceback" not in err
    code, out, err = _run("create", "--user", "alice", "--no-audit", "--file", str(path))
    assert code == 0 and out.strip() and path.exists()
    assert "not recorded in the audit log (--no-audit)" in err


def test_with_no_store_yet_the_first_token_is_made_and_said_unrecorded(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    code, out, err = _run("create", "--user", "root", "--admin", "--file", str(path))
    assert code == 0 and out.strip()
    assert "warning: there is no store at " in err and "not recorded in the audit log" in err
