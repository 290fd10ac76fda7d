"""The JobStore contract for renderings kept across restarts: one is returned only for the very
version of the job it was kept for, in the very form, however the keys are spread; run against
every backend through the parametrized `store_url`."""

from __future__ import annotations

from appliance.domain.listing import JobKey, JobQuery
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority
from appliance.store.jobs import JobStore
from tests.integration.store.driving import T0, drive, submit

FORM = "form-a"


def keys_of(store: JobStore, query: JobQuery | None = None) -> list[JobKey]:
    keys, _ = store.list_job_keys(query or JobQuery(include_terminal=True, limit=1000))
    return keys


def keep_all(store: JobStore, keys: list[JobKey], form: str = FORM) -> None:
    store.keep_renderings([(key, f"{key[0]}@{key[2]}".encode(), True) for key in keys], form)


def test_a_rendering_is_returned_for_its_version_in_its_form_only(store: JobStore) -> None:
    for i in range(3):
        submit(store, f"wsjob-kept{i}", now=T0 + i)
    before = keys_of(store)
    keep_all(store, before)

    assert store.kept_renderings(before, FORM) == {
        key[0]: (f"{key[0]}@{key[2]}".encode(), True) for key in before
    }
    assert store.kept_renderings(before, "form-b") == {}  # other code's renderings

    store.update_labels("wsjob-kept1", {"team": "nlp"}, [], T0 + 10)  # bumps its version
    store.set_priority("wsjob-kept2", Priority.P1, T0 + 10)
    drive(store, "wsjob-kept0", Phase.CANCELLED, T0 + 10)
    after = keys_of(store)
    assert {k[0]: k[2] for k in after} != {k[0]: k[2] for k in before}  # every one changed
    assert store.kept_renderings(after, FORM) == {}


def test_keeping_again_replaces_the_jobs_rendering(store: JobStore) -> None:
    submit(store, "wsjob-again", now=T0)
    [old] = keys_of(store)
    keep_all(store, [old])
    store.update_labels("wsjob-again", {"team": "cv"}, [], T0 + 1)
    [new] = keys_of(store)
    store.keep_renderings([(new, b"new", False)], FORM)

    assert store.kept_renderings([new], FORM) == {"wsjob-again": (b"new", False)}
    assert store.kept_renderings([old], FORM) == {}


def test_keys_spread_over_a_long_history_are_found_one_by_one(store: JobStore) -> None:
    # 60 jobs kept; a page asks for three of them, far apart: their range holds 60 renderings,
    # more than a scan of it reads, so they are looked up by key.
    for i in range(60):
        submit(store, f"wsjob-spread{i:02d}", now=T0 + i)
    everything = keys_of(store)
    keep_all(store, everything)
    sparse = [everything[0], everything[30], everything[59]]

    assert store.kept_renderings(sparse, FORM) == {
        key[0]: (f"{key[0]}@{key[2]}".encode(), True) for key in sparse
    }
    assert store.kept_renderings(everything, FORM).keys() == {k[0] for k in everything}


def test_keys_of_jobs_created_at_the_same_time_are_told_apart(store: JobStore) -> None:
    for i in range(4):
        submit(store, f"wsjob-tie{i}", now=T0)  # one batch: one created_at
    everything = keys_of(store)
    keep_all(store, everything[:2])

    found = store.kept_renderings(everything, FORM)

    assert found.keys() == {everything[0][0], everything[1][0]}
