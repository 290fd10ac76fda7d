"""plan_replicas: counts per role, MemoryX sizing from model bytes, capacity errors."""

from __future__ import annotations

import math

import pytest

from appliance.domain.errors import InsufficientCapacity, InvalidSpec
from appliance.domain.inventory import Node, NodeKind, default_pool
from appliance.domain.model_shapes import BYTES_PER_PARAM
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role, plan_replicas
from appliance.domain.spec import JobSpec, validate_spec

# 784 -> 64 -> 10: 784*64 + 64 + 64*10 + 10 parameters.
MLP = "model:\n  name: fc_mnist\n  input_size: 784\n  hidden_sizes: [64]\n  num_classes: 10\n"
MLP_PARAMS = 784 * 64 + 64 + 64 * 10 + 10


def spec(
    num_csx: int = 1, optimizer: str = "sgd", params: str = MLP, mode: str = "train"
) -> JobSpec:
    params_yaml = f"{params}optimizer:\n  optimizer_type: {optimizer}\n"
    return validate_spec(params_yaml=params_yaml, num_csx=num_csx, num_steps=10, mode=mode)


def pool(
    systems: int = 4, memx: tuple[int, ...] = (16 << 30,), swarmx: tuple[int, ...] = (4,)
) -> list[Node]:
    return (
        [Node(f"cs2-{i:02d}", NodeKind.SYSTEM, 1) for i in range(1, systems + 1)]
        + [Node(f"memx-{i:02d}", NodeKind.MEMORYX, c) for i, c in enumerate(memx, 1)]
        + [Node(f"swarmx-{i:02d}", NodeKind.SWARMX, c) for i, c in enumerate(swarmx, 1)]
    )


def counts(plan: ReplicaPlan) -> dict[Role, int]:
    return {g.role: g.count for g in plan.groups}


@pytest.mark.parametrize("num_csx", [1, 2, 3, 4])
def test_one_chief_one_cs2_per_system_and_one_memoryx_and_swarmx_on_default_pool(
    num_csx: int,
) -> None:
    plan = plan_replicas(spec(num_csx), default_pool())

    assert counts(plan) == {Role.CHIEF: 1, Role.CS2: num_csx, Role.MEMORYX: 1, Role.SWARMX: 1}
    assert plan.group(Role.CS2).demand == 1
    assert plan.group(Role.SWARMX).demand == num_csx
    assert plan.replica_names()[:2] == [("chief-0", Role.CHIEF, 0), ("cs2-0", Role.CS2, 0)]
    assert len(plan.replica_names()) == num_csx + 3


def test_swarmx_count_follows_the_fanout_of_a_swarmx_node() -> None:
    plan = plan_replicas(spec(5), pool(systems=6, swarmx=(2, 2, 2)))

    assert plan.group(Role.SWARMX) == ReplicaGroup(Role.SWARMX, 3, demand=2)


@pytest.mark.parametrize(("optimizer", "copies"), [("sgd", 1), ("adam", 2), ("AdamW", 2)])
def test_model_bytes_are_weights_plus_optimizer_state(optimizer: str, copies: int) -> None:
    plan = plan_replicas(spec(optimizer=optimizer), default_pool())

    assert plan.model_bytes == MLP_PARAMS * BYTES_PER_PARAM * (1 + copies)
    assert plan.group(Role.MEMORYX) == ReplicaGroup(Role.MEMORYX, 1, demand=plan.model_bytes)


def test_a_model_larger_than_one_memoryx_node_is_spread_over_several() -> None:
    model_bytes = MLP_PARAMS * BYTES_PER_PARAM * 2  # sgd: 407,120 bytes
    node = 150_000

    plan = plan_replicas(spec(), pool(memx=(node,) * 4))

    expected_count = math.ceil(model_bytes / node)
    assert expected_count == 3
    assert plan.group(Role.MEMORYX) == ReplicaGroup(
        Role.MEMORYX, expected_count, demand=math.ceil(model_bytes / expected_count)
    )


def test_a_model_larger_than_all_memoryx_is_insufficient_capacity_naming_params() -> None:
    with pytest.raises(InsufficientCapacity) as raised:
        plan_replicas(spec(), pool(memx=(150_000,) * 2))
    assert raised.value.field == "params"
    assert f"needs {MLP_PARAMS * BYTES_PER_PARAM * 2} bytes" in raised.value.message


def test_more_systems_than_the_pool_is_insufficient_capacity_naming_num_csx() -> None:
    with pytest.raises(InsufficientCapacity) as raised:
        plan_replicas(spec(5), default_pool())
    assert raised.value.field == "num_csx"
    assert "num_csx=5" in raised.value.message
    assert "at most 4" in raised.value.message
    assert isinstance(raised.value, InvalidSpec)


def test_too_few_swarmx_ports_is_insufficient_capacity_naming_num_csx() -> None:
    with pytest.raises(InsufficientCapacity) as raised:
        plan_replicas(spec(3), pool(systems=4, swarmx=(1, 1)))
    assert raised.value.field == "num_csx"
    assert "needs 3 SwarmX" in raised.value.message


@pytest.mark.parametrize("missing", ["memx", "swarmx"])
def test_a_pool_without_memoryx_or_swarmx_can_run_nothing(missing: str) -> None:
    nodes = pool(
        memx=() if missing == "memx" else (1 << 30,), swarmx=() if missing == "swarmx" else (4,)
    )
    with pytest.raises(InsufficientCapacity):
        plan_replicas(spec(), nodes)


@pytest.mark.parametrize(
    ("params", "optimizer", "says"),
    [
        ("model:\n  name: gpt9\n", "sgd", "model.name 'gpt9' is not known"),
        (MLP, "lamb", "optimizer.optimizer_type 'lamb'"),
        ("model:\n  hidden_sizes: [big]\n", "sgd", "must be integers"),
        ("model:\n  hidden_sizes: [0]\n", "sgd", "between 1 and"),
    ],
)
def test_unknown_models_and_optimizers_name_params(params: str, optimizer: str, says: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        plan_replicas(spec(params=params, optimizer=optimizer), default_pool())
    assert raised.value.field == "params"
    assert says in raised.value.message


def data_set_spec(
    num_csx: int, per_csx: int = 1, section: str = "train_input", mode: str = "train"
) -> JobSpec:
    params = (
        f"{MLP}{section}:\n  data_dir: /data/mnist\nrunconfig:\n  num_workers_per_csx: {per_csx}\n"
    )
    return spec(num_csx, params=params, mode=mode)


@pytest.mark.parametrize(("num_csx", "per_csx"), [(1, 1), (2, 3), (4, 4)])
def test_a_job_that_reads_a_data_set_has_num_workers_per_csx_input_workers_per_cs2(
    num_csx: int, per_csx: int
) -> None:
    plan = plan_replicas(data_set_spec(num_csx, per_csx), default_pool())

    assert plan.groups[-1] == ReplicaGroup(Role.WORKER, num_csx * per_csx, demand=1)
    names = [name for name, role, _ in plan.replica_names() if role is Role.WORKER]
    assert names == [f"worker-{k}" for k in range(num_csx * per_csx)]


@pytest.mark.parametrize(("mode", "workers"), [("eval", 2), ("train_and_eval", 2), ("train", 0)])
def test_eval_input_data_dir_gives_input_workers_to_the_modes_that_evaluate(
    mode: str, workers: int
) -> None:
    # As the Model Zoo's run.py: a --mode train job never reads eval_input.data_dir.
    plan = plan_replicas(data_set_spec(2, section="eval_input", mode=mode), default_pool())

    assert counts(plan).get(Role.WORKER, 0) == workers


def test_a_synthetic_job_has_no_input_workers_and_its_shape_is_unchanged() -> None:
    plan = plan_replicas(spec(2), default_pool())

    assert Role.WORKER not in counts(plan)
    assert [role for role, _, _ in plan.shape] == ["chief", "cs2", "memoryx", "swarmx"]


def test_more_input_workers_than_worker_slots_is_insufficient_capacity() -> None:
    with pytest.raises(InsufficientCapacity) as raised:
        plan_replicas(data_set_spec(4, 5), default_pool())  # 20 workers, 2 nodes x 8 slots

    assert raised.value.field == "params"
    assert "20 input workers" in raised.value.message and "16 slots" in raised.value.message


def test_a_pool_without_worker_nodes_refuses_a_data_set_job_naming_num_csx() -> None:
    with pytest.raises(InsufficientCapacity) as raised:
        plan_replicas(data_set_spec(1), pool())

    assert raised.value.field == "num_csx"
    assert plan_replicas(spec(1), pool()).shape == plan_replicas(spec(1), default_pool()).shape


PIPELINED = MLP + "runconfig:\n  execution_strategy: pipeline\n"


def test_a_pipelined_job_is_its_chief_and_one_cs2_with_no_memoryx_or_swarmx() -> None:
    plan = plan_replicas(spec(1, params=PIPELINED), default_pool())

    assert counts(plan) == {Role.CHIEF: 1, Role.CS2: 1}
    assert plan.shape == (("chief", 1, 0), ("cs2", 1, 1))
    assert plan.group(Role.MEMORYX).count == 0  # a role it has none of counts 0


def test_a_pipelined_job_on_a_data_set_has_its_input_workers() -> None:
    params = "train_input:\n  data_dir: /data/mnist\n" + PIPELINED
    plan = plan_replicas(spec(1, params=params), default_pool())

    assert counts(plan) == {Role.CHIEF: 1, Role.CS2: 1, Role.WORKER: 1}


def test_a_pipelined_job_on_several_cs2s_is_refused_naming_num_csx() -> None:
    with pytest.raises(InvalidSpec) as raised:
        plan_replicas(spec(2, params=PIPELINED), default_pool())

    assert raised.value.field == "num_csx"
    assert "pipeline runs on one CS-2; use weight_streaming" in raised.value.message


def test_an_unknown_execution_strategy_is_refused_naming_the_key() -> None:
    params = MLP + "runconfig:\n  execution_strategy: layer_pipelined\n"
    with pytest.raises(InvalidSpec) as raised:
        plan_replicas(spec(1, params=params), default_pool())

    assert "runconfig.execution_strategy" in f"{raised.value.field} {raised.value.message}"
