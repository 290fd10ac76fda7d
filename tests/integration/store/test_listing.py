"""The JobStore contract for listing (keyset pages newest first, filters, page tokens, summary
keys and versions), run against every backend through the parametrized `store_url`."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job, Progress
from appliance.domain.listing import JobQuery
from appliance.domain.phases import ACTIVE, Phase
from appliance.domain.selectors import parse_selector
from appliance.store.jobs import JobStore
from tests.integration.store.driving import (
    PHASE_ORDER,
    T0,
    drive,
    ids,
    submit,
)

# ---- list -------------------------------------------------------------------------------------


def listed(store: JobStore, query: JobQuery) -> tuple[list[Job], str]:
    """One page of `query`: its keys, then their summaries in key order (as the listing
    service reads them)."""
    keys, token = store.list_job_keys(query)
    found = {job.id: job for job in store.job_summaries([k[0] for k in keys])}
    return [found[k[0]] for k in keys], token


def test_list_shows_active_jobs_by_default_and_terminal_on_request(store: JobStore) -> None:
    for i, phase in enumerate(PHASE_ORDER):
        submit(store, f"wsjob-{phase.lower()}", now=T0 + i)
        drive(store, f"wsjob-{phase.lower()}", phase)

    active, token = listed(store, JobQuery())
    everything, _ = listed(store, JobQuery(include_terminal=True))

    assert token == ""
    assert {j.phase for j in active} == set(ACTIVE)
    assert len(active) == len(ACTIVE)
    assert {j.phase for j in everything} == set(Phase)
    assert len(everything) == len(Phase)


def test_list_filters_by_user(store: JobStore) -> None:
    submit(store, "wsjob-a1", user="alice", now=T0)
    submit(store, "wsjob-b1", user="bob", now=T0 + 1)
    submit(store, "wsjob-a2", user="alice", now=T0 + 2)

    jobs, _ = listed(store, JobQuery(user="alice"))

    assert ids(jobs) == ["wsjob-a2", "wsjob-a1"]


def test_list_filters_on_every_label_given(store: JobStore) -> None:
    submit(store, "wsjob-ml-prod", labels={"team": "ml", "env": "prod"}, now=T0)
    submit(store, "wsjob-ml-dev", labels={"team": "ml", "env": "dev"}, now=T0 + 1)
    submit(store, "wsjob-infra-prod", labels={"team": "infra", "env": "prod"}, now=T0 + 2)
    submit(store, "wsjob-unlabelled", now=T0 + 3)

    def matching(labels: dict[str, str]) -> list[str]:
        return ids(listed(store, JobQuery(labels=labels))[0])

    assert matching({"team": "ml", "env": "prod"}) == ["wsjob-ml-prod"]
    assert matching({"team": "ml"}) == ["wsjob-ml-dev", "wsjob-ml-prod"]
    assert matching({"env": "prod"}) == ["wsjob-infra-prod", "wsjob-ml-prod"]
    assert matching({"team": "ml", "env": "staging"}) == []
    assert matching({}) == [
        "wsjob-unlabelled",
        "wsjob-infra-prod",
        "wsjob-ml-dev",
        "wsjob-ml-prod",
    ]


@pytest.mark.parametrize(
    "text",
    ["team!=ml", "team in (ml,infra),env!=dev", "team notin (ml)", "env", "!env",
     "!team,!env", "team=ml,env in (prod,staging)"],
)  # fmt: skip
def test_a_label_selector_filters_as_it_matches_in_memory(store: JobStore, text: str) -> None:
    """The store's query and LabelSelector.matches (what a watch of many jobs applies) agree."""
    every = {
        "wsjob-ml-prod": {"team": "ml", "env": "prod"},
        "wsjob-ml-dev": {"team": "ml", "env": "dev"},
        "wsjob-infra-prod": {"team": "infra", "env": "prod"},
        "wsjob-unlabelled": {},
    }
    for n, (job_id, labels) in enumerate(every.items()):
        submit(store, job_id, labels=labels, now=T0 + n)
    selector = parse_selector(text)

    found = ids(listed(store, JobQuery(selector=selector))[0])

    expected = [job_id for job_id, labels in every.items() if selector.matches(labels)]
    assert found == list(reversed(expected)) and found


def test_list_is_newest_first_with_id_breaking_ties(store: JobStore) -> None:
    submit(store, "wsjob-b", now=T0)
    submit(store, "wsjob-c", now=T0 + 2)
    submit(store, "wsjob-a", now=T0)
    submit(store, "wsjob-d", now=T0 + 1)

    jobs, _ = listed(store, JobQuery())

    assert ids(jobs) == ["wsjob-c", "wsjob-d", "wsjob-b", "wsjob-a"]


def test_keyset_pagination_returns_every_job_exactly_once_in_order(store: JobStore) -> None:
    # Three jobs share each submit time (fractional, to round-trip through the token), so page
    # boundaries fall inside groups of equal created_at.
    expected = []
    for i in range(25):
        job_id = f"wsjob-{(i * 7) % 25:04d}"
        created = T0 + (i // 3) * 0.001
        submit(store, job_id, now=created)
        expected.append((created, job_id))
    expected.sort(reverse=True)

    seen: list[str] = []
    pages = []
    token = ""
    while True:
        jobs, token = listed(store, JobQuery(limit=7, page_token=token))
        pages.append(len(jobs))
        seen += ids(jobs)
        if not token:
            break
        assert len(pages) < 10, "pagination does not end"

    assert pages == [7, 7, 7, 4]
    assert seen == [job_id for _, job_id in expected]


def test_last_full_page_has_no_token(store: JobStore) -> None:
    for i in range(4):
        submit(store, f"wsjob-{i}", now=T0 + i)

    first, token = listed(store, JobQuery(limit=2))
    second, last = listed(store, JobQuery(limit=2, page_token=token))

    assert (ids(first), ids(second), last) == (
        ["wsjob-3", "wsjob-2"],
        ["wsjob-1", "wsjob-0"],
        "",
    )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


@pytest.mark.parametrize(
    "token",
    [
        "not a token!",
        _b64(b"not json"),
        _b64(b"\xff\xfe"),
        _b64(b"5"),
        _b64(b"[1.0]"),
        _b64(b'["yesterday", "wsjob-a"]'),
        _b64(b'[null, "wsjob-a"]'),
    ],
)
def test_bad_page_token_is_invalid_spec(store: JobStore, token: str) -> None:
    submit(store, "wsjob-a")
    with pytest.raises(InvalidSpec) as raised:
        listed(store, JobQuery(page_token=token))
    assert raised.value.field == "page_token"


# ---- summary keys (what StreamJobs caches under) ------------------------------------------------


def all_keys(store: JobStore, query: JobQuery) -> list[tuple[str, float, int]]:
    keys: list[tuple[str, float, int]] = []
    while True:
        page, token = store.list_job_keys(query)
        keys += page
        if not token:
            return keys
        query = dataclasses.replace(query, page_token=token)


def test_pages_of_any_size_list_the_same_keys(store: JobStore) -> None:
    for i in range(12):
        submit(store, f"wsjob-key{i:04d}", now=T0 + (i // 4) * 0.001)
    drive(store, "wsjob-key0003", Phase.CANCELLED)

    for include_terminal in (False, True):
        one_page = ids(listed(store, JobQuery(include_terminal=include_terminal, limit=500))[0])
        keys = all_keys(store, JobQuery(include_terminal=include_terminal, limit=5))
        assert [k[0] for k in keys] == one_page
    assert "wsjob-key0003" not in [k[0] for k in all_keys(store, JobQuery(limit=5))]


def test_every_change_a_summary_shows_bumps_its_version(store: JobStore) -> None:
    submit(store, "wsjob-ver0")

    def version() -> int:
        [(_, _, v)] = all_keys(store, JobQuery(include_terminal=True))
        return v

    seen = [version()]
    store.set_pending_reasons({"wsjob-ver0": "needs 1 system, 0 free"}, T0)
    seen.append(version())
    store.set_pending_reasons({"wsjob-ver0": "needs 1 system, 0 free"}, T0)  # unchanged
    assert version() == seen[-1]
    drive(store, "wsjob-ver0", Phase.RUNNING)
    seen.append(version())
    store.set_progress("wsjob-ver0", 1, Progress(step=3, num_steps=100, loss=1.5))
    seen.append(version())
    store.set_phase("wsjob-ver0", Phase.SUCCEEDED, "done", T0 + 2)
    seen.append(version())
    assert seen == sorted(set(seen)), seen

    [summary] = store.job_summaries(["wsjob-ver0", "wsjob-unknown"])
    assert summary.phase is Phase.SUCCEEDED and summary.progress.step == 3
    assert summary.spec.params_yaml == ""  # summaries leave out the params


def test_phase_filter_lists_exactly_those_phases(store: JobStore) -> None:
    for i in range(4):
        submit(store, f"wsjob-ph{i:04d}", now=T0 + i)
    drive(store, "wsjob-ph0001", Phase.CANCELLED)
    drive(store, "wsjob-ph0002", Phase.RUNNING)
    query = JobQuery(phases=frozenset({Phase.CANCELLED, Phase.RUNNING}))
    expected = ["wsjob-ph0002", "wsjob-ph0001"]
    assert ids(listed(store, query)[0]) == expected
    assert [k[0] for k in all_keys(store, dataclasses.replace(query, limit=1))] == expected
    assert store.count_by_phase() == {Phase.QUEUED: 2, Phase.RUNNING: 1, Phase.CANCELLED: 1}


def test_pages_of_jobs_created_at_the_same_time_follow_their_tokens(store: JobStore) -> None:
    for i in range(5):
        submit(store, f"wsjob-same{i}", now=T0 + (i // 3))  # 3 at T0, 2 at T0 + 1
    seen: list[str] = []
    token = ""
    while True:
        keys, token = store.list_job_keys(JobQuery(limit=2, page_token=token))
        seen += [k[0] for k in keys]
        if not token:
            break
    assert seen == ["wsjob-same4", "wsjob-same3", "wsjob-same2", "wsjob-same1", "wsjob-same0"]
