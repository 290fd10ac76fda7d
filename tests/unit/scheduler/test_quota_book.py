"""QuotaBook keeps what the lending queues leave idle and what all queues borrow as running
sums (#38): asking whether a queue may borrow costs the same with 30 queues as with 2, and
answers exactly as a book summed afresh does."""

from __future__ import annotations

import random

import pytest

from appliance.domain.queues import Quota
from appliance.scheduler import quotas as quotas_module
from appliance.scheduler.quotas import Need, QuotaBook


def _thirty() -> dict[str, Quota]:
    book = {f"cq-{i:02d}": Quota(20, 20 << 30, borrow_systems=100) for i in range(30)}
    book["private"] = Quota(20, 20 << 30, lend=False)
    return book


def test_the_kept_sums_answer_as_a_fresh_book_after_every_admission() -> None:
    rng = random.Random(38)
    quotas = _thirty()
    book = QuotaBook(quotas, {})
    names = sorted(quotas)
    for _ in range(2_000):
        name = rng.choice(names)
        need = Need(rng.choice([1, 5, 20]), rng.choice([0, 1 << 30]))
        fresh = QuotaBook(quotas, book.used)
        assert book.why_not_borrow(name, need) == fresh.why_not_borrow(name, need)
        if book.within(name, need) or not book.why_not_borrow(name, need):
            book.add(name, need)
    assert any(book.borrowing(name) for name in names)  # the walk did borrow


def test_asking_to_borrow_does_not_walk_every_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    book = QuotaBook(_thirty(), {"cq-00": Need(20, 0)})
    book.why_not_borrow("cq-00", Need(1, 0))  # the sums, once
    calls = 0
    over = quotas_module._over

    def counted(quota: Quota, used: Need, sign: int = 1) -> Need:
        nonlocal calls
        calls += 1
        return over(quota, used, sign)

    monkeypatch.setattr(quotas_module, "_over", counted)
    for i in range(30):
        book.add(f"cq-{i:02d}", Need(1, 0))
        book.why_not_borrow(f"cq-{i:02d}", Need(5, 0))
    assert calls <= 30 * 8  # a few per question, never one per queue
