"""Leadership in the store, on SQLite and PostgreSQL: the lease row keeps the LeaseLock
contract, and the fence refuses every phase write under an epoch that is not the newest. On
PostgreSQL a new leader ends the sessions a paused one left open, holding their locks."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.exc import DBAPIError

from appliance.domain.leadership import LeaseLock, NotLeader
from appliance.domain.phases import Phase
from appliance.store.engine import make_engine, migrate
from appliance.store.fence import Fence
from appliance.store.jobs import JobStore
from appliance.store.leadership import SqlLeaseLock
from appliance.store.tables import JobRow, LeaderFenceRow
from tests.integration.lease_contract import LeaseLockContract
from tests.postgres import PostgresServer
from tests.unit.harness import NOW, new_jobs


class TestSqlLeaseLock(LeaseLockContract):
    @pytest.fixture
    def handle(self, engine: Engine) -> Callable[[], LeaseLock]:
        return lambda: SqlLeaseLock(engine, "appliance-leader")


class Held:
    """The epoch a coordinator holds now (what Leadership.epoch answers)."""

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch

    def __call__(self) -> int | None:
        return self.epoch


def coordinator(engine: Engine, held: Held) -> JobStore:
    store = JobStore(engine)
    store.fence = Fence(held)
    return store


def test_only_the_newest_epoch_moves_phases(engine: Engine, store: JobStore) -> None:
    [job] = store.create_jobs(new_jobs(["wsjob-fence0000000001"]), NOW)
    old_epoch, new_epoch = Held(1), Held(None)
    old, new = coordinator(engine, old_epoch), coordinator(engine, new_epoch)
    with pytest.raises(NotLeader):  # elected, not in office: the fence is still at 0
        old.set_phase(job.id, Phase.CANCELLED, "by the old leader", NOW)
    assert old.take_office(1, "old", NOW)
    assert old.request_requeue(job.id, job.attempt, "x", NOW)[0] is False  # not holding: no-op
    # A standby holds no epoch: it writes nothing.
    with pytest.raises(NotLeader):
        new.set_phase(job.id, Phase.CANCELLED, "by a standby", NOW)
    # The new leader takes office under epoch 2; the old one (paused meanwhile) wakes up.
    new_epoch.epoch = 2
    assert new.take_office(2, "new", NOW)
    assert not old.take_office(2, "old", NOW) and not old.take_office(1, "old", NOW)
    with pytest.raises(NotLeader, match="epoch 1 is over"):
        old.set_phase(job.id, Phase.CANCELLED, "by the old leader", NOW)
    with pytest.raises(NotLeader):
        old.set_phases([], NOW)
    with pytest.raises(NotLeader):
        old.request_requeue(job.id, job.attempt, "stop it", NOW)
    assert store.phase_of(job.id) is Phase.QUEUED  # nothing of the old leader's was written
    assert new.set_phase(job.id, Phase.CANCELLED, "by the new leader", NOW).applied
    assert store.leader_in_office() == ("new", 2)


def test_one_coordinator_is_not_fenced(store: JobStore) -> None:
    [job] = store.create_jobs(new_jobs(["wsjob-fence0000000001"]), NOW)
    assert store.leader_in_office() == ("", 0)
    assert store.set_phase(job.id, Phase.CANCELLED, "no election", NOW).applied


@pytest.mark.postgres
def test_a_new_leader_ends_the_sessions_a_paused_leader_left_open(
    postgres: PostgresServer,
) -> None:
    """The old leader is paused inside a phase write: the fence read FOR SHARE and a job's row
    updated, not committed. Without its sessions ended, taking office would wait on the
    fence, and any write to that job on the row, for as long as the pause lasts."""
    with postgres.fresh_database() as url:
        engines = [make_engine(url, session_name=f"appliance-test-{n}") for n in ("old", "new")]
        migrate(engines[0])
        old, new = coordinator(engines[0], Held(1)), coordinator(engines[1], Held(2))
        [job] = old.create_jobs(new_jobs(["wsjob-fence0000000002"]), NOW)
        assert old.take_office(1, "old", NOW)
        paused = engines[0].connect()
        threads = ThreadPoolExecutor(1)
        try:
            paused.execute(select(LeaderFenceRow.epoch).with_for_update(read=True))
            paused.execute(update(JobRow).where(JobRow.id == job.id).values(reason="paused"))
            assert threads.submit(new.take_office, 2, "new", NOW).result(timeout=15)
            cancel = threads.submit(new.set_phase, job.id, Phase.CANCELLED, "by the new", NOW)
            assert cancel.result(timeout=15).applied
            with pytest.raises(DBAPIError, match="terminat"):  # woken, it finds its session ended
                paused.execute(select(1))
            assert new.get_job(job.id).reason != "paused"  # what it had not committed is gone
            assert new.leader_in_office() == ("new", 2)
        finally:
            paused.close()  # if the test failed, releases what the new leader waits on
            threads.shutdown()
            for engine in engines:
                engine.dispose()
