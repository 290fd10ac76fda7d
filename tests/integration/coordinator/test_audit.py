"""The audit log over a real coordinator (#36): a scripted run by two users and an admin leaves
one record per action and per refusal, at every door, and never a token nor the params text;
only admins read it; retention prunes it. Both stores."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from click.testing import CliRunner, Result

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.audit import AuditEvent, AuditQuery, Door, Outcome
from appliance.domain.errors import PermissionDenied
from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from appliance.store.engine import make_engine
from appliance.store.jobs import JobStore
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

MARKER = "params-text-that-must-never-be-recorded"
PARAMS = f"# {MARKER}\nmodel:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@dataclass
class Cluster:
    running: RunningCoordinator
    tokens: dict[str, str]
    audit_file: Path

    def stub(self, channel: grpc.Channel) -> cluster_pb2_grpc.ClusterServiceStub:
        return cluster_pb2_grpc.ClusterServiceStub(channel)

    def rest(self, path: str) -> str:
        return f"https://127.0.0.1:{self.running.coordinator.http_port}/api/v1{path}"

    def events(self) -> list[AuditEvent]:
        """Every record, oldest first, as the admin reads them."""
        with ApplianceClient(self.running.address, token=self.tokens["root"]) as root:
            return list(reversed(root.audit_events(limit=10_000)))


@pytest.fixture
def cluster(tmp_path: Path, store_url: str) -> Iterator[Cluster]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {
        "alice": create_token(tokens_file, "alice", ["nlp"], admin=False),
        "bob": create_token(tokens_file, "bob", ["cv"], admin=False),
        "root": create_token(tokens_file, "root", [], admin=True),
    }
    audit_file = tmp_path / "audit.jsonl"
    running = RunningCoordinator(
        tmp_path / "data", auth_tokens_file=tokens_file, database_url=store_url,
        audit_level="Request", audit_file=str(audit_file),
    ).start()  # fmt: skip
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)  # jobs wait
    try:
        yield Cluster(running, tokens, audit_file)
    finally:
        running.stop()


def _as(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _submit(stub: cluster_pb2_grpc.ClusterServiceStub, token: str, num_csx: int = 1) -> pb.Job:
    spec = pb.JobSpec(params_yaml=PARAMS, num_csx=num_csx, num_steps=2)
    return stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=_as(token))


def _refused(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()  # type: ignore[no-any-return]


def test_a_scripted_run_leaves_one_record_per_action_and_refusal(cluster: Cluster) -> None:
    t = cluster.tokens
    with secure_channel(cluster.running.address) as channel:
        stub = cluster.stub(channel)
        a = _submit(stub, t["alice"])
        b = _submit(stub, t["bob"])
        stub.SetJobPriority(
            pb.SetJobPriorityRequest(job_id=a.id, priority=2), metadata=_as(t["alice"])
        )
        stub.UpdateJobLabels(
            pb.UpdateJobLabelsRequest(job_id=a.id, set={"team": "nlp"}), metadata=_as(t["alice"])
        )
        denied = _refused(
            lambda: stub.CancelJob(pb.CancelJobRequest(job_id=a.id), metadata=_as(t["bob"]))
        )
        assert denied is grpc.StatusCode.PERMISSION_DENIED
        stub.CancelJob(pb.CancelJobRequest(job_id=b.id), metadata=_as(t["bob"]))
        stub.SetQueue(pb.SetQueueRequest(name="nlp", systems=1), metadata=_as(t["root"]))
        stub.SetNodeState(
            pb.SetNodeStateRequest(name="cs2-04", state="drain"), metadata=_as(t["root"])
        )
        booking = pb.CreateReservationRequest(
            name="fans", system_count=1, maint=True, duration_seconds=60
        )
        stub.CreateReservation(booking, metadata=_as(t["root"]))
        fans = pb.DeleteReservationRequest(name="fans")
        refused = _refused(lambda: stub.DeleteReservation(fans, metadata=_as(t["bob"])))
        assert refused is grpc.StatusCode.PERMISSION_DENIED
        stub.DeleteReservation(fans, metadata=_as(t["root"]))
        # Reads that succeed leave no record.
        stub.GetJob(pb.GetJobRequest(job_id=a.id), metadata=_as(t["alice"]))
        stub.ListJobs(pb.ListJobsRequest(), metadata=_as(t["bob"]))
        bad = _refused(lambda: stub.ListJobs(pb.ListJobsRequest(), metadata=_as("not-a-token")))
        assert bad is grpc.StatusCode.UNAUTHENTICATED
        invalid = _refused(lambda: _submit(stub, t["alice"], num_csx=0))
        assert invalid is grpc.StatusCode.INVALID_ARGUMENT
    cancelled = httpx.post(
        cluster.rest(f"/jobs/{a.id}/cancel"),
        json={},
        headers={"authorization": f"Bearer {t['alice']}"},
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.headers["x-request-id"]

    expected = [
        ("alice", Door.GRPC, "submit", f"job/{a.id}", Outcome.ALLOWED),
        ("bob", Door.GRPC, "submit", f"job/{b.id}", Outcome.ALLOWED),
        ("alice", Door.GRPC, "set-priority", f"job/{a.id}", Outcome.ALLOWED),
        ("alice", Door.GRPC, "label", f"job/{a.id}", Outcome.ALLOWED),
        ("bob", Door.GRPC, "cancel", f"job/{a.id}", Outcome.REFUSED),
        ("bob", Door.GRPC, "cancel", f"job/{b.id}", Outcome.ALLOWED),
        ("root", Door.GRPC, "set-queue", "queue/nlp", Outcome.ALLOWED),
        ("root", Door.GRPC, "node-drain", "node/cs2-04", Outcome.ALLOWED),
        ("root", Door.GRPC, "create-reservation", "reservation/fans", Outcome.ALLOWED),
        ("bob", Door.GRPC, "delete-reservation", "reservation/fans", Outcome.REFUSED),
        ("root", Door.GRPC, "delete-reservation", "reservation/fans", Outcome.ALLOWED),
        ("", Door.GRPC, "list-jobs", "", Outcome.REFUSED),
        ("alice", Door.GRPC, "submit", "job", Outcome.REFUSED),
        ("alice", Door.REST, "cancel", f"job/{a.id}", Outcome.ALLOWED),
    ]

    def seen() -> list[tuple[str, Door, str, str, Outcome]]:
        return [(e.user, e.door, e.verb, e.target, e.outcome) for e in cluster.events()]

    wait_until(lambda: len(seen()) >= len(expected), 10, "the audit records")
    assert seen() == expected
    events = cluster.events()
    by_verb = {(e.verb, e.outcome): e for e in events}
    assert by_verb["cancel", Outcome.REFUSED].reason.startswith("PERMISSION_DENIED: ")
    assert by_verb["list-jobs", Outcome.REFUSED].reason.startswith("UNAUTHENTICATED: ")
    assert by_verb["submit", Outcome.REFUSED].reason.startswith("INVALID_ARGUMENT: ")
    root = by_verb["set-queue", Outcome.ALLOWED]
    assert (root.admin, root.groups, root.reason) == (True, (), "")
    alice = events[0]
    assert (alice.groups, alice.admin) == (("nlp",), False)
    assert alice.source.startswith("ipv")  # gRPC's peer: ipv4:127.0.0.1:PORT
    assert len(alice.body_sha256) == 64 and alice.body_bytes > len(PARAMS)  # Request level
    assert len({e.request_id for e in events}) == len(events)

    # Never a token nor the params text: in the store, the API, or the JSON-lines file.
    lines = cluster.audit_file.read_text().splitlines()
    assert len(lines) == len(expected)
    assert [json.loads(line)["verb"] for line in lines] == [e[2] for e in expected]
    everything = "\n".join([*lines, *(json.dumps(e.document()) for e in events)])
    for secret in [*t.values(), "not-a-token", MARKER]:
        assert secret not in everything


def test_only_admins_read_the_audit_log(cluster: Cluster) -> None:
    alice = cluster.tokens["alice"]
    with (
        ApplianceClient(cluster.running.address, token=alice) as client,
        pytest.raises(PermissionDenied, match="only admins may read the audit log"),
    ):
        client.audit_events()
    answer = httpx.get(cluster.rest("/audit"), headers={"authorization": f"Bearer {alice}"})
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == "only admins may read the audit log"
    root = cluster.tokens["root"]
    answer = httpx.get(cluster.rest("/audit?limit=1"), headers={"authorization": f"Bearer {root}"})
    assert answer.status_code == 200, answer.text
    # Both refusals are on record (the admin's reads that succeeded are not).
    wait_until(lambda: len(cluster.events()) == 2, 10, "the refusals' records")
    refusals = [(e.user, e.door, e.verb, e.outcome) for e in cluster.events()]
    assert refusals == [
        ("alice", Door.GRPC, "list-audit-events", Outcome.REFUSED),
        ("alice", Door.REST, "list-audit-events", Outcome.REFUSED),
    ]
    as_root = {"authorization": f"Bearer {root}"}
    page = httpx.get(cluster.rest("/audit?limit=1"), headers=as_root).json()
    assert len(page["events"]) == 1 and page["next_page_token"]
    assert httpx.get(cluster.rest("/audit?limit=100000"), headers=as_root).status_code == 422

    def csctl(token: str, *args: str) -> Result:
        server = ["--server", cluster.running.address, "--token", token]
        return CliRunner().invoke(cli, [*server, "get", "audit", *args])

    shown = csctl(root, "--user", "alice", "-o", "wide")
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("list-audit-events") == 2 and "REQUEST-ID" in shown.output
    denied = csctl(alice, "--since", "1h")
    assert denied.exit_code == 1
    assert len(denied.output.strip().splitlines()) == 1, denied.output
    assert "only admins may read the audit log" in denied.output


def test_retention_prunes_old_records_without_a_request(tmp_path: Path, store_url: str) -> None:
    engine = make_engine(store_url)
    running = RunningCoordinator(tmp_path / "data", database_url=store_url).start()
    running.stop()  # the store is made and migrated
    store = JobStore(engine)
    now = time.time()
    old = AuditEvent(
        at=now - 3 * 86_400, request_id="old", user="alice", groups=(), admin=False,
        source="", door=Door.GRPC, verb="cancel", object_kind="job", object_name="wsjob-x",
        outcome=Outcome.ALLOWED,
    )  # fmt: skip
    store.append_audit_events([old, dataclasses.replace(old, at=now, request_id="new")])
    running = RunningCoordinator(
        tmp_path / "data", database_url=store_url, audit_retention_days=1
    ).start()
    try:
        wait_until(
            lambda: [e.request_id for e in store.audit_events(AuditQuery(limit=1000))] == ["new"],
            10,
            "the old record to be pruned",
        )
    finally:
        running.stop()
        engine.dispose()
