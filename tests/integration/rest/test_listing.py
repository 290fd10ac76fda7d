"""List pages over REST: newest first, cursor pagination, label/user/phase filters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.coordinator.harness import wait_until
from tests.integration.rest.conftest import Rest


def _pages(rest: Rest, **params: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    token = ""
    while True:
        body = rest.http.get("/api/v1/jobs", params={**params, "page_token": token}).json()
        pages.append([j["id"] for j in body["jobs"]])
        token = body["next_page_token"]
        if not token:
            return pages


@pytest.fixture(scope="module")
def seven(parked: Rest) -> list[dict[str, Any]]:
    """Seven queued jobs labelled set=seven; the 2nd, 4th and 6th cancelled."""
    jobs = [parked.submit(labels={"set": "seven", "n": str(i)}) for i in range(7)]
    for job in jobs[1::2]:
        parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")
    return jobs


def test_pages_are_newest_first_and_complete(parked: Rest, seven: list[dict[str, Any]]) -> None:
    ids = [j["id"] for j in seven]
    pages = _pages(parked, all=True, label="set=seven", limit=3)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [i for page in pages for i in page] == ids[::-1]
    active = _pages(parked, label="set=seven", limit=2)
    assert [i for page in active for i in page] == ids[::-2]


def test_phase_filter_pages_stay_exact(parked: Rest, seven: list[dict[str, Any]]) -> None:
    ids = [j["id"] for j in seven]
    cancelled = _pages(parked, label="set=seven", phase="CANCELLED", limit=2)
    assert [i for page in cancelled for i in page] == ids[1::2][::-1]
    assert all(len(page) <= 2 for page in cancelled)
    queued = _pages(parked, label="set=seven", phase=["QUEUED", "RUNNING"], limit=3)
    assert [i for page in queued for i in page] == ids[::2][::-1]
    none = parked.http.get("/api/v1/jobs", params={"label": "set=seven", "phase": "FAILED"})
    assert none.json() == {"jobs": [], "next_page_token": ""}


def test_label_selectors_combine(parked: Rest, seven: list[dict[str, Any]]) -> None:
    one = parked.http.get("/api/v1/jobs", params={"all": True, "label": ["set=seven", "n=3"]})
    assert [j["id"] for j in one.json()["jobs"]] == [seven[3]["id"]]
    same = parked.http.get("/api/v1/jobs", params={"all": True, "label": "set=seven,n=3"})
    assert same.json() == one.json()
    nobody = parked.http.get("/api/v1/jobs", params={"all": True, "user": "someone-else"})
    assert nobody.json()["jobs"] == []
    mine = parked.http.get("/api/v1/jobs", params={"all": True, "user": "anonymous", "limit": 7})
    assert len(mine.json()["jobs"]) == 7


def test_listed_queue_positions_and_reasons_match_get_and_follow_priority(parked: Rest) -> None:
    ids = [parked.submit(labels={"set": "queue"})["id"] for _ in range(3)]

    def agreed(reasons_settled: Callable[[dict[str, tuple[int, str]]], bool]) -> dict[str, Any]:
        """id -> (queue position, pending reason), once the list and GET agree and the
        scheduler has written the reasons `reasons_settled` waits for (a pass after a change
        rewrites them; positions are read per call)."""
        views: list[dict[str, tuple[int, str]]] = []

        def same() -> bool:
            listed = parked.http.get("/api/v1/jobs", params={"label": "set=queue"}).json()
            views[:] = [
                {j["id"]: (j["queue_position"], j["pending_reason"]) for j in listed["jobs"]},
                {
                    i: (parked.job(i)["queue_position"], parked.job(i)["pending_reason"])
                    for i in ids
                },
            ]
            return views[0] == views[1] and reasons_settled(views[0])

        wait_until(same, 10, "the list and GET to agree")
        return views[0]

    before = agreed(lambda view: view[ids[-1]][1].startswith("needs 1 system"))
    assert before[ids[0]][0] < before[ids[1]][0] < before[ids[2]][0]
    moved = parked.http.patch(f"/api/v1/jobs/{ids[2]}", json={"priority": "p1"})
    assert moved.status_code == 200, moved.text
    positions = {i: parked.job(i)["queue_position"] for i in ids}  # at once, not after a pass
    assert positions[ids[2]] < positions[ids[0]] < positions[ids[1]]
    after = agreed(lambda view: "behind " + ids[2] in view[ids[0]][1])
    assert after[ids[2]][0] < after[ids[0]][0] < after[ids[1]][0]
    for job_id in ids:
        parked.http.post(f"/api/v1/jobs/{job_id}/cancel")
