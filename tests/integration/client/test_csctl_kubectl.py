"""csctl as kubectl users expect it, against a real coordinator: label selectors with !=, in,
notin and bare keys (filtered by the store, so pages stay full), the real csctl's columns,
--sort-by, --no-headers, -o name, and `get jobs -w` printing changes as they happen."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import httpx
import pytest

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.client.conftest import Csctl, hold_queue
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

CSCTL = Path(sys.executable).parent / "csctl"


def _names(result_stdout: str, *, headers: bool = True) -> list[str]:
    rows = result_stdout.splitlines()[1:] if headers else result_stdout.splitlines()
    return [row.split()[0] for row in rows]


@pytest.fixture
def labelled(
    coordinator: RunningCoordinator, observer: ApplianceClient, params_file: Path, tmp_path: Path
) -> dict[str, str]:
    """Five queued jobs (oldest first): nlp (P1), cv+tmp (eval), owner only (P3), nlp+tmp,
    and one with no labels."""
    hold_queue(coordinator)
    evaluated = tmp_path / "evaluated"  # an evaluation needs a checkpoint to evaluate
    evaluated.mkdir()
    (evaluated / "checkpoint_1.npz").write_bytes(b"")
    specs = {
        "nlp": {"labels": {"team": "nlp"}, "priority": "p1"},
        "cv": {"labels": {"team": "cv", "tmp": "1"}, "mode": "eval", "model_dir": str(evaluated)},
        "owner": {"labels": {"owner": "x"}, "priority": "p3"},
        "nlp-tmp": {"labels": {"team": "nlp", "tmp": "1"}},
        "bare": {},
    }
    return {
        name: observer.submit(params=params_file, num_csx=1, num_steps=5, **fields).id  # type: ignore[arg-type]
        for name, fields in specs.items()
    }


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("team in (nlp,cv),!tmp", {"nlp"}),
        ("team!=nlp", {"cv", "owner", "bare"}),  # as kubectl: jobs without `team` match
        ("team notin (nlp, cv)", {"owner", "bare"}),
        ("tmp", {"cv", "nlp-tmp"}),
        ("!team,!owner", {"bare"}),
        ("team==nlp,tmp=1", {"nlp-tmp"}),
    ],
)
def test_label_selectors_as_kubectl(
    csctl: Csctl, labelled: dict[str, str], selector: str, expected: set[str]
) -> None:
    by_id = {job_id: name for name, job_id in labelled.items()}

    result = csctl("get", "jobs", "-l", selector)

    assert result.exit_code == 0, result.output
    assert {by_id[job_id] for job_id in _names(result.stdout)} == expected


def test_a_selector_is_applied_by_the_store_so_pages_stay_full(
    coordinator: RunningCoordinator, csctl: Csctl, labelled: dict[str, str]
) -> None:
    # --max-jobs asks for pages of ListJobs: filtered after paging, the newest page (bare,
    # nlp-tmp) would hold one matching job instead of two, or none.
    result = csctl("get", "jobs", "-l", "tmp,team notin (nlp)", "--max-jobs", "1", "-o", "name")
    assert result.stdout.split() == [labelled["cv"]]
    result = csctl("get", "jobs", "-l", "team notin (nlp)", "--max-jobs", "2", "-o", "name")
    assert result.stdout.split() == [labelled["bare"], labelled["owner"]]

    rest = httpx.get(
        f"https://127.0.0.1:{coordinator.coordinator.http_port}/api/v1/jobs",
        params={"label": ["team notin (nlp)", "!owner"], "limit": 1},
        timeout=10,
    ).json()
    assert [job["id"] for job in rest["jobs"]] == [labelled["bare"]]
    assert rest["next_page_token"]


def test_a_bad_selector_is_refused_naming_the_field(
    coordinator: RunningCoordinator, csctl: Csctl
) -> None:
    result = csctl("get", "jobs", "-l", "team in (nlp")
    assert result.exit_code == 2
    assert "selector 'team in (nlp': expected ',' or ')' in the values" in result.stderr

    with secure_channel(coordinator.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ListJobs(cluster_pb2.ListJobsRequest(label_selector="a=1,b notin ()"), timeout=10)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "label_selector 'a=1,b notin ()': the values of 'b' must not be empty" in str(
        raised.value.details()
    )
    too_long = httpx.get(
        f"https://127.0.0.1:{coordinator.coordinator.http_port}/api/v1/jobs",
        params={"label": "a" * 5000},
        timeout=10,
    )
    assert too_long.status_code == 422
    assert too_long.json()["error"]["field"] == "label"


def test_cancel_jobs_takes_the_same_selectors(
    coordinator: RunningCoordinator,
    observer: ApplianceClient,
    csctl: Csctl,
    labelled: dict[str, str],
) -> None:
    # Only negations match every job without the key: they narrow, they do not say whose jobs.
    refused = csctl("cancel", "jobs", "-l", "team notin (nlp),!owner")
    assert refused.exit_code != 0 and "only narrow" in refused.stderr
    assert all(observer.get_job(job_id).phase is Phase.QUEUED for job_id in labelled.values())
    cancelled = csctl("cancel", "jobs", "-l", "team notin (nlp),!owner", "--all-users")
    assert (cancelled.exit_code, cancelled.stdout) == (0, "cancelled 2 jobs\n")
    phases = {name: observer.get_job(job_id).phase for name, job_id in labelled.items()}
    assert {name for name, phase in phases.items() if phase is Phase.CANCELLED} == {"cv", "bare"}

    rest = httpx.post(
        f"https://127.0.0.1:{coordinator.coordinator.http_port}/api/v1/jobs:cancel",
        json={"label_selector": "team in (nlp)", "labels": {"tmp": "1"}},
        timeout=10,
    )
    assert rest.status_code == 200 and rest.json()["cancelled_ids"] == [labelled["nlp-tmp"]]
    bad = httpx.post(
        f"https://127.0.0.1:{coordinator.coordinator.http_port}/api/v1/jobs:cancel",
        json={"label_selector": "team in nlp"},
        timeout=10,
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "label_selector"
    with secure_channel(coordinator.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.CancelJobs(cluster_pb2.CancelJobsRequest(label_selector="!"), timeout=10)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "label_selector '!': expected a label key" in str(raised.value.details())
    assert observer.get_job(labelled["nlp"]).phase is Phase.QUEUED  # never selected
    csctl("cancel", "jobs", "--all-users")


def test_columns_sort_by_no_headers_and_name(csctl: Csctl, labelled: dict[str, str]) -> None:
    table = csctl("get", "jobs")
    header, *rows = table.stdout.splitlines()
    assert header.split() == [
        "NAME", "AGE", "DURATION", "PHASE", "TYPE", "PRIORITY", "CSX", "SYSTEMS", "USER",
        "LABELS",
    ]  # fmt: skip
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells[labelled["cv"]][2:6] == ["-", "QUEUED", "eval", "P2"]
    assert cells[labelled["owner"]][4:6] == ["train", "P3"]

    by_priority = csctl("get", "jobs", "--sort-by", "PRIORITY", "--no-headers")
    assert by_priority.exit_code == 0, by_priority.output
    names = _names(by_priority.stdout, headers=False)
    assert names[0] == labelled["nlp"] and names[-1] == labelled["owner"]  # P1 ... P3
    by_field = csctl("get", "jobs", "--sort-by", ".spec.labels.team", "-o", "name")
    assert by_field.stdout.split()[:3] == [labelled["cv"], labelled["nlp-tmp"], labelled["nlp"]]
    by_mode = csctl("get", "jobs", "--sort-by", "{.spec.mode}", "-o", "name")
    assert by_mode.stdout.split()[0] == labelled["cv"]  # eval before train

    unknown = csctl("get", "jobs", "--sort-by", ".spec.colour")
    assert unknown.exit_code == 2
    assert "Invalid value for '--sort-by': unknown field '.spec.colour'" in unknown.stderr

    names_only = csctl("get", "jobs", "-o", "name")
    assert names_only.stdout.split() == list(reversed(labelled.values()))  # newest first


class _Watch:
    """`csctl get jobs -w` as a process of its own; its lines as they come."""

    def __init__(self, address: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "CSCTL_SERVER"}
        self.proc = subprocess.Popen(
            [str(CSCTL), "--server", address, "get", "jobs", "-w", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []  # not yet matched by `until`
        self.printed: list[str] = []  # every line so far
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def until(self, predicate: object, what: str) -> str:
        def found() -> bool:
            while not self.lines.empty():
                self.seen.append(self.lines.get())
                self.printed.append(self.seen[-1])
            return any(predicate(line) for line in self.seen)  # type: ignore[operator]

        try:
            wait_until(found, 20, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; seen {self.seen}; {self._state()}") from None
        line = next(line for line in self.seen if predicate(line))  # type: ignore[operator]
        self.seen = self.seen[self.seen.index(line) + 1 :]
        return line

    def _state(self) -> str:
        if self.proc.poll() is None:
            return "csctl still runs"
        stderr = self.proc.stderr.read() if self.proc.stderr else ""
        return f"csctl exited {self.proc.returncode}: {stderr}"

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(10)


def test_watch_prints_the_list_then_each_change(
    coordinator: RunningCoordinator,
    observer: ApplianceClient,
    params_file: Path,
) -> None:
    hold_queue(coordinator)
    old = observer.submit(params=params_file, num_csx=1, num_steps=5, labels={"w": "1"}).id
    other = observer.submit(params=params_file, num_csx=1, num_steps=5, labels={"w": "2"}).id
    watch = _Watch(coordinator.address, "-l", "w in (1,3)")
    names = _Watch(coordinator.address, "-l", "w in (1,3)", "-o", "name", "--no-headers")
    try:
        header = watch.until(lambda line: line.startswith("NAME"), "the header")
        assert header.split()[:4] == ["NAME", "AGE", "DURATION", "PHASE"]
        listed = watch.until(lambda line: line.startswith("wsjob-"), "the listed job")
        assert listed.split()[0] == old
        column = header.index("PHASE")
        assert names.until(lambda line: line.startswith("wsjob-"), "the listed id") == old

        new = observer.submit(params=params_file, num_csx=1, num_steps=5, labels={"w": "3"}).id
        line = watch.until(lambda line: line.startswith(new), "the new job")
        assert line[column:].split()[0] == "QUEUED"
        # Each watcher hears of a change before the next is made: changes that reach a slow
        # watcher together are shown once, in their latest state (as kubectl's watch may).
        names.until(lambda line: line == new, "the name of the new job")
        observer.set_priority(new, "p1")
        line = watch.until(lambda line: line.startswith(new), "the new priority")
        assert line.split()[5] == "P1"
        names.until(lambda line: line == new, "the name of the job given a new priority")
        observer.cancel_job(other)  # not selected: never printed
        observer.cancel_job(new)
        line = watch.until(lambda line: line.startswith(new), "the cancel")
        assert line[column:].split()[0] == "CANCELLED"
        names.until(lambda line: line == new, "the name of the cancelled job")
        observer.update_labels(old, {"x": "y"})
        line = watch.until(lambda line: line.startswith(old), "the new label")
        assert "w=1,x=y" in line
        assert not any(line.startswith(other) for line in watch.seen)
        # -o name: the listed id, then an id for each change (3 of new, 1 of old), no header.
        names.until(lambda line: line == old, "the name of the relabelled job")
        assert names.printed == [old, new, new, new, old]  # listed, then one a change
    finally:
        code = watch.stop()
        names.stop()
        observer.cancel_job(old)
    assert code == 130
    assert "Traceback" not in (watch.proc.stderr.read() if watch.proc.stderr else "")
