"""Queues on a real coordinator with real replicas (the issue's checks): a queue below its
quota reclaims the systems another queue borrows (checkpoint now, requeue, resume from that
checkpoint), as `csctl get queues` shows; and a dependency chain runs in order, a failed link
cancelling the rest with the reason."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import csctl

PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [32]},
    "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05},
    "runconfig": {"checkpoint_steps": 500, "log_steps": 10, "seed": 3},
}
QUEUES = "queues:\n  - {name: nlp, systems: 2}\n  - {name: vision, systems: 2}\n"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    with serving(tmp_path / "data", queues_file=str(queues)) as running:
        yield running


def _row(table: str, name: str) -> dict[str, str]:
    lines = table.splitlines()
    header = lines[0].split()
    row = next(line.split() for line in lines[1:] if line.split()[0] == name)
    return dict(zip(header, row, strict=True))


def test_a_queue_below_its_quota_reclaims_the_systems_another_borrows(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    with ApplianceClient(address, detach=True) as client:
        # Steps sized from a run's timeline (about 50 steps/s each while three jobs share two
        # cores): the borrower is reclaimed at about step 250, and `first` must still be
        # running when `after` is read (about step 750); each has 3x that.
        first = client.submit(params=PARAMS, num_csx=2, num_steps=2500, queue="nlp")
        borrower = client.submit(params=PARAMS, num_csx=2, num_steps=1000, queue="nlp")
        for job in (first, borrower):
            wait_until(lambda job=job: job.status.progress.step >= 20, 120, "nlp's jobs to run")
        before = csctl(address, "get", "queues")
        nlp, vision = _row(before, "nlp"), _row(before, "vision")
        assert (nlp["QUOTA"], nlp["USED"], nlp["BORROWED"], nlp["RUNNING"]) == ("2", "4", "2", "2")
        assert (vision["USED"], vision["LENT"]) == ("0", "2")

        # Long enough to be still running when csctl reads the queues on a busy machine (it
        # trains about 12 s, csctl reads within 2 s of its start).
        arrival = client.submit(params=PARAMS, num_csx=2, num_steps=600, queue="vision")
        wait_until(
            lambda: arrival.status.phase is Phase.RUNNING, 60, "vision's job to run within seconds"
        )
        after = csctl(address, "get", "queues")
        nlp, vision = _row(after, "nlp"), _row(after, "vision")
        assert (nlp["USED"], nlp["BORROWED"], nlp["PENDING"]) == ("2", "0", "1")
        assert (vision["USED"], vision["LENT"]) == ("2", "0")
        assert first.status.phase is Phase.RUNNING  # within its quota: never a victim

        assert arrival.wait(timeout=150).phase is Phase.SUCCEEDED
        final = borrower.wait(timeout=150)
        events = [e.reason for e in borrower.events()]
        arrived_at = arrival.status.started_at
        client.cancel_job(first.id)

    assert final.phase is Phase.SUCCEEDED, final.reason
    asked = (
        f"preempted by {arrival.id} (P2): queue vision reclaims its quota; asked for a "
        "checkpoint within 30 s"
    )
    assert asked in events, events
    written = next(
        m for r in events if (m := re.search(r"checkpointed at step (\d+); requeued", r))
    )
    step = int(written[1])
    first_attempt, second = final.attempts
    assert first_attempt.ended_in is Phase.QUEUED and step % 500 != 0
    assert second.resumed_from == step  # from the checkpoint written for the reclaim
    assert arrived_at < second.scheduled_at


def test_a_chain_runs_in_order_and_a_failed_link_cancels_what_follows(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    chain = str(tmp_path / "chain")  # the evaluation evaluates what the training wrote there
    with ApplianceClient(coordinator.address, detach=True) as client:
        compile_ = client.submit(params=PARAMS, num_csx=1, num_steps=50)
        train = client.submit(
            params=PARAMS, num_csx=1, num_steps=100, depends_on=[compile_.id], model_dir=chain
        )
        evaluate = client.submit(
            params=PARAMS, num_csx=1, num_steps=20, mode="eval", depends_on=[train.id],
            model_dir=chain,
        )  # fmt: skip
        done = [job.wait(timeout=300) for job in (compile_, train, evaluate)]
        assert [d.phase for d in done] == [Phase.SUCCEEDED] * 3, [d.reason for d in done]
        assert done[0].finished_at <= done[1].started_at
        assert done[1].finished_at <= done[2].started_at
        shown = csctl(coordinator.address, "get", "job", train.id, "-o", "table")
        document = csctl(coordinator.address, "get", "job", train.id, "-o", "yaml")
        assert f"- afterok:{compile_.id}" in document and f"- {evaluate.id}" in document
        assert f"DEPENDS ON: afterok:{compile_.id}" in shown
        assert f"DEPENDENTS: {evaluate.id}" in shown
        # Usage by queue: three 1-system jobs, each held from its scheduling (after submit,
        # before it ran) to its end.
        report = json.loads(
            csctl(coordinator.address, "get", "usage", "--by", "queue", "-o", "json")
        )
        [row] = report["rows"]
        assert (row["key"], row["succeeded"], row["failed"], row["attempts"]) == (
            "default", 3, 0, 3,
        )  # fmt: skip
        ran = sum(d.finished_at - d.started_at for d in done) / 3600
        held = sum(d.finished_at - d.created_at for d in done) / 3600
        assert ran <= row["system_hours"] <= held

        again = client.submit(params=PARAMS, num_csx=1, num_steps=1_000_000)
        evaluate = client.submit(
            params=PARAMS, num_csx=1, num_steps=20, mode="eval", depends_on=[again.id]
        )
        wait_until(lambda: again.status.phase is Phase.RUNNING, 60, "the training to run")
        waits = f"waiting for {again.id} (RUNNING) to succeed"
        # Reasons are as fresh as the scheduler's last pass (one every 2 s at most).
        wait_until(lambda: evaluate.status.pending_reason == waits, 10, "the reason to say so")
        system = next(r for r in again.status.replicas if r.name == "cs2-0")
        os.kill(system.pid, signal.SIGKILL)
        wait_until(lambda: again.status.phase is Phase.FAILED, 60, "the training to fail")
        wait_until(lambda: evaluate.status.phase.terminal, 30, "the evaluation to end")
        cancelled = evaluate.status

    assert cancelled.phase is Phase.CANCELLED
    assert cancelled.reason == (
        f"dependency {again.id} is FAILED and this job was to run only after it succeeded"
    )


def _csctl(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [Path(sys.executable).parent / "csctl", "--server", address, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_csctl_defines_lists_and_deletes_queues_and_reports_usage(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    over = _csctl(address, "queue", "set", "cv", "--systems", "1")
    assert over.returncode == 1 and "add up to 5 systems; the pool has 4" in over.stderr
    said = csctl(address, "queue", "set", "vision", "--systems", "1", "--borrow-systems", "1",
                 "--no-lend", "--groups", "cv,ml")  # fmt: skip
    assert said.startswith("queue/vision set")
    made = csctl(address, "queue", "set", "cv", "--systems", "1", "--memoryx", "8GiB")
    assert "queue/cv set" in made
    wide = _row(csctl(address, "get", "queues", "-o", "wide"), "vision")
    assert (wide["QUOTA"], wide["BORROW-LIMIT"], wide["LENDS"], wide["GROUPS"]) == (
        "1", "1", "no", "cv,ml",
    )  # fmt: skip
    assert wide["SOURCE"] == "admin"
    documents = json.loads(csctl(address, "get", "queues", "-o", "json"))
    cv = next(d for d in documents if d["name"] == "cv")
    assert (cv["quota"]["systems"], cv["memoryx_bytes"]) == (1, 8 << 30)
    bad = _csctl(address, "queue", "set", "cv", "--memoryx", "lots")
    assert bad.returncode == 1 and "memoryx" in bad.stderr
    assert "queue/cv deleted" in csctl(address, "queue", "delete", "cv")
    gone = _csctl(address, "queue", "delete", "cv")
    assert gone.returncode == 1 and "queue cv not found" in gone.stderr

    assert csctl(address, "get", "usage", "--by", "queue", "-o", "csv").startswith("queue,")
    window = _csctl(address, "get", "usage", "--since", "last tuesday")
    assert window.returncode == 2 and "--since" in window.stderr
    backwards = _csctl(address, "get", "usage", "--since", "2026-01-02", "--until", "2026-01-01")
    assert backwards.returncode == 1 and "since must be before until" in backwards.stderr
