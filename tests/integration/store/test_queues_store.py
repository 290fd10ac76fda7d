"""The JobStore contract for queues, dependencies and fair-share usage, on every backend:
which of the queues file and a run-time change wins, what a queue holds, each ended attempt
folded into its queue's usage exactly once, and what queued jobs wait for."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from sqlalchemy.orm import Session

from appliance.domain.dependencies import Condition, Dependency
from appliance.domain.errors import Conflict, InvalidSpec, NotFound
from appliance.domain.fair_share import held
from appliance.domain.inventory import default_pool
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.queues import QueueSpec, Source, resolve_quotas, validate_queue
from appliance.domain.spec import validate_spec
from appliance.store import queue_defs
from appliance.store.jobs import JobStore, NewJob
from appliance.store.queue_defs import QueueLoad
from tests.integration.store.driving import PARAMS, PATH_TO, T0, define_queues, placements_for
from tests.integration.store.driving import submit as submit_default

GIB = 1 << 30
DAY = 86_400.0


def submit(
    store: JobStore, job_id: str, queue: str = "default", num_csx: int = 1, *,
    now: float = T0, depends_on: tuple[Dependency, ...] = (),
) -> None:  # fmt: skip
    spec = validate_spec(params_yaml=PARAMS, num_csx=num_csx, num_steps=100, queue=queue)
    spec = dataclasses.replace(spec, depends_on=depends_on)
    plan = plan_replicas(spec, default_pool())
    store.create_jobs([NewJob(job_id, "alice", spec, plan, groups=("ml", "nlp"))], now)


def _named(spec: QueueSpec) -> tuple[str, Callable[[QueueSpec | None], QueueSpec]]:
    return spec.name, lambda _current: spec


def fits(queues: list[QueueSpec]) -> None:
    resolve_quotas(queues, 4, 64 * GIB)


def spec_of(store: JobStore, name: str) -> QueueSpec | None:
    """The queue as read, and as the kept copy has it after the read."""
    read = {q.name: q for q in store.queue_specs()}.get(name)
    kept = store.cached_queue_specs()
    assert kept is not None and kept.get(name) == read
    return read


def test_the_kept_copy_of_the_definitions_goes_with_every_change(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.cached_queue_specs() is None  # nothing read yet
    store.queue_specs()
    assert list(store.cached_queue_specs() or {}) == ["default"]
    store.put_queue(*_named(validate_queue(name="nlp", systems=1)), fits)
    assert store.cached_queue_specs() is None  # the change dropped it
    assert spec_of(store, "nlp") is not None
    store.delete_queue("nlp")
    assert store.cached_queue_specs() is None
    assert spec_of(store, "nlp") is None
    store.apply_queues_file([validate_queue(name="cv", systems=1)], "digest-1", fits)
    assert store.cached_queue_specs() is None
    # A refused change drops it too (nothing was written, but nothing is lost by reading).
    store.queue_specs()
    with pytest.raises(NotFound):
        store.delete_queue("vision")
    assert store.cached_queue_specs() is None

    # A read that overlaps a change is not kept: it may have seen the definitions before it.
    read_specs, changed = queue_defs._specs, []

    def read_during_a_change(s: Session) -> list[QueueSpec]:
        found = read_specs(s)
        if not changed:  # the change's own check reads them too
            changed.append(True)
            store.put_queue(*_named(validate_queue(name="nlp", systems=1)), fits)
        return found

    monkeypatch.setattr(queue_defs, "_specs", read_during_a_change)
    assert "nlp" not in [q.name for q in store.queue_specs()]  # read before the change
    assert store.cached_queue_specs() is None
    monkeypatch.undo()
    store.queue_specs()
    assert store.cached_queue_specs() is not None
    monkeypatch.setattr(queue_defs, "SPECS_MAX_AGE", -1.0)  # too old: read again
    assert store.cached_queue_specs() is None


def test_the_file_wins_when_it_changes_and_run_time_changes_stand_until_then(
    store: JobStore,
) -> None:
    nlp = validate_queue(name="nlp", systems=2, source=Source.FILE)
    assert store.apply_queues_file([nlp], "digest-1", fits).applied
    assert [q.name for q in store.queue_specs()] == ["default", "nlp"]  # default always there
    # An admin changes nlp and adds a queue at run time; a restart with the same file keeps it.
    store.put_queue(*_named(validate_queue(name="nlp", systems=1, updated_by="root")), fits)
    store.put_queue(*_named(validate_queue(name="cv", systems=1)), fits)
    assert not store.apply_queues_file([nlp], "digest-1", fits).applied
    assert spec_of(store, "nlp") == validate_queue(name="nlp", systems=1, updated_by="root")
    # The file is edited: it replaces every definition, except a busy queue it drops.
    submit(store, "wsjob-cv", "cv")
    vision = validate_queue(name="vision", systems=1, source=Source.FILE)
    applied = store.apply_queues_file([nlp, vision], "digest-2", fits)
    assert applied.applied and applied.kept == ("cv",)
    specs = {q.name: q for q in store.queue_specs()}
    assert sorted(specs) == ["cv", "default", "nlp", "vision"]
    assert specs["nlp"].systems == 2 and specs["nlp"].source is Source.FILE
    # The dropped queue keeps its jobs but no quota (so the file's quotas may use the whole
    # pool), and goes once its last job ends.
    assert (specs["cv"].systems, specs["cv"].source) == (0, Source.KEPT)
    research = validate_queue(name="research", systems=2, source=Source.FILE)
    assert store.apply_queues_file([research, nlp], "digest-3", fits).kept == ("cv",)
    assert store.sweep_kept_queues() == []
    assert store.set_phase("wsjob-cv", Phase.CANCELLED, "no", T0 + 1).applied
    assert store.sweep_kept_queues() == ["cv"]
    assert [q.name for q in store.queue_specs()] == ["default", "nlp", "research"]


def test_queues_over_the_pool_are_refused_and_nothing_is_stored(store: JobStore) -> None:
    store.put_queue(*_named(validate_queue(name="nlp", systems=3)), fits)
    with pytest.raises(InvalidSpec, match="add up to 5 systems"):
        store.put_queue(*_named(validate_queue(name="cv", systems=2)), fits)
    with pytest.raises(InvalidSpec):
        store.apply_queues_file([validate_queue(name="x", systems=9)], "d", fits)
    assert [q.name for q in store.queue_specs()] == ["default", "nlp"]
    # The refused file left no digest: the same digest applies once it fits.
    assert store.apply_queues_file([], "d", fits).applied
    assert [q.name for q in store.queue_specs()] == ["default"]


def test_a_queue_is_deleted_only_when_empty(store: JobStore) -> None:
    store.put_queue(*_named(validate_queue(name="nlp", systems=2)), fits)
    with pytest.raises(Conflict, match="default queue always exists"):
        store.delete_queue("default")
    with pytest.raises(NotFound):
        store.delete_queue("vision")
    submit(store, "wsjob-a", "nlp")
    with pytest.raises(Conflict, match="1 job\\(s\\) waiting"):
        store.delete_queue("nlp")
    assert store.set_phase("wsjob-a", Phase.CANCELLED, "no", T0 + 1).applied
    store.delete_queue("nlp")
    assert spec_of(store, "nlp") is None
    # A submit that checked the queue before it was deleted is refused as it is written.
    with pytest.raises(InvalidSpec, match="queue nlp does not exist") as caught:
        submit(store, "wsjob-late", "nlp")
    assert caught.value.field == "queue" and store.existing_jobs(["wsjob-late"]) == set()


def test_what_each_queue_holds_and_waits_for(store: JobStore) -> None:
    define_queues(store, "nlp", "vision")
    submit(store, "wsjob-a", "nlp", num_csx=2)
    submit(store, "wsjob-b", "nlp", now=T0 + 1)
    submit(store, "wsjob-c", "vision", now=T0 + 2)
    assert store.schedule("wsjob-a", placements_for(store, "wsjob-a"), T0 + 3).applied
    loads = store.queue_loads()
    assert loads["nlp"].systems == 2 and loads["nlp"].memoryx_bytes > 0
    assert (loads["nlp"].pending, loads["nlp"].running) == (1, 1)
    assert loads["vision"] == QueueLoad(pending=1)
    # A position is counted within the job's own queue.
    assert store.get_job("wsjob-b").queue_position == 1
    assert store.get_job("wsjob-c").queue_position == 1
    assert store.queue_positions(["wsjob-b", "wsjob-c"]) == {"wsjob-b": 1, "wsjob-c": 1}
    assert store.get_job("wsjob-a").spec.queue == "nlp"


def test_each_ended_attempt_is_folded_into_its_queue_once(store: JobStore) -> None:
    half_life = 7 * DAY
    define_queues(store, "nlp")
    submit(store, "wsjob-a", "nlp", num_csx=2)
    placements = placements_for(store, "wsjob-a")
    memoryx = sum(p.amount for p in placements if p.role.value == "memoryx")
    assert store.schedule("wsjob-a", placements, T0).applied
    # While it holds: counted from its scheduling to now.
    now = T0 + 3600
    running = store.queue_usage(now, half_life)["nlp"]
    assert running.system_seconds == pytest.approx(
        held(2, memoryx, T0, now, now, half_life).system_seconds
    )
    for step in PATH_TO[Phase.SUCCEEDED][1:]:
        assert store.set_phase("wsjob-a", step, "on", now).applied
    assert store.fold_usage(now, half_life) == 1
    assert store.fold_usage(now, half_life) == 0  # exactly once
    later = now + half_life
    usage = store.queue_usage(later, half_life)["nlp"]
    expected = held(2, memoryx, T0, now, later, half_life)
    assert usage.system_seconds == pytest.approx(expected.system_seconds)
    assert usage.memoryx_byte_seconds == pytest.approx(expected.memoryx_byte_seconds)
    assert "default" not in store.queue_usage(later, half_life)


def test_dependencies_are_stored_and_shown_both_ways(store: JobStore) -> None:
    submit_default(store, "wsjob-compile")
    submit(store, "wsjob-train", depends_on=(Dependency("wsjob-compile"),), now=T0 + 1)
    submit(
        store, "wsjob-eval", now=T0 + 2,
        depends_on=(Dependency("wsjob-train", Condition.AFTERANY),),
    )  # fmt: skip
    assert store.existing_jobs(["wsjob-train", "wsjob-nope"]) == {"wsjob-train"}
    train = store.get_job("wsjob-train")
    assert train.spec.depends_on == (Dependency("wsjob-compile"),)
    assert train.dependents == ("wsjob-eval",)
    states = {(d.job_id, d.depends_on): (d.condition, d.phase) for d in store.dependency_states()}
    assert states == {
        ("wsjob-train", "wsjob-compile"): (Condition.AFTEROK, Phase.QUEUED),
        ("wsjob-eval", "wsjob-train"): (Condition.AFTERANY, Phase.QUEUED),
    }
    assert store.set_phase("wsjob-compile", Phase.CANCELLED, "no", T0 + 3).applied
    assert store.set_phase("wsjob-train", Phase.CANCELLED, "dependency", T0 + 4).applied
    [(job, on, phase)] = [(d.job_id, d.depends_on, d.phase) for d in store.dependency_states()]
    assert (job, on, phase) == ("wsjob-eval", "wsjob-train", Phase.CANCELLED)


def test_a_queues_caps_per_user_are_stored_and_what_users_hold_in_it_is_counted(
    store: JobStore,
) -> None:
    """#37: the three caps per user round-trip (None too), and held_in_queues counts each
    user's admitted jobs and their systems in the queues asked for, only those."""
    spec = validate_queue(
        name="nlp", systems=2, max_running_jobs_per_user=1, max_systems_per_user=3
    )
    store.put_queue(*_named(spec), fits)
    assert spec_of(store, "nlp") == spec
    assert spec.max_queued_jobs_per_user is None
    submit(store, "wsjob-nlp-two", "nlp", 2)
    submit(store, "wsjob-nlp-one", "nlp", 1, now=T0 + 1)
    submit(store, "wsjob-default", "default", 1, now=T0 + 2)
    for job_id in ("wsjob-nlp-two", "wsjob-default"):
        store.schedule(job_id, placements_for(store, job_id), T0 + 3)
    assert store.held_in_queues(["nlp"]) == {("nlp", "alice"): (1, 2)}
    assert store.held_in_queues(["vision"]) == {}
