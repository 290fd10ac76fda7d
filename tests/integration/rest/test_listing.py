"""List pages over REST: newest first, cursor pagination, label/user/phase filters."""

from __future__ import annotations

from typing import Any

import pytest

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
