"""Who talks to whom inside one wsjob, derived from the coordinator's Topology.

A pipelined job (no MemoryX, no SwarmX in its topology) runs on one CS-2 that holds the whole
model and serves the chief as the job's one MemoryX (roles/cs2_pipelined.py).

Invariants of the weight-streaming wiring:
- layer l lives on memoryx-(l % M);
- cs2-i streams through swarmx-(i // fanout) with fanout = ceil(N / S);
- MemoryX applies a layer's update once every SwarmX with at least one CS-2 behind it (all of
  them, unless S is oversized for N) has handed over its partial sum for that layer and step;
- on a data set, cs2-i takes step s's batch from worker-(i * W + s % W), W input workers per
  CS-2 (runconfig.num_workers_per_csx); a synthetic job has no workers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import yaml

from appliance._proto.v1 import common_pb2, control_pb2
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import Params, parse_params
from appliance.workers.models.model import StreamedModel
from appliance.workers.models.model_catalog import build_model

_MODES = {
    common_pb2.MODE_UNSPECIFIED: "train",
    common_pb2.MODE_TRAIN: "train",
    common_pb2.MODE_EVAL: "eval",
    common_pb2.MODE_TRAIN_AND_EVAL: "train_and_eval",
}


@dataclasses.dataclass(frozen=True)
class PeerAddress:
    """One replica of the job and where it serves."""

    name: str
    role: str
    index: int
    address: str


@dataclasses.dataclass(frozen=True)
class JobLayout:
    """The job's replicas by role, its params, model and mode, and the streaming wiring."""

    job_id: str
    num_steps: int
    model_dir: str
    mode: str  # train, eval or train_and_eval
    params: Params
    model: StreamedModel
    cs2: tuple[PeerAddress, ...]
    memoryx: tuple[PeerAddress, ...]
    swarmx: tuple[PeerAddress, ...]
    # Input workers (on a data set; none for synthetic data): W per CS-2, worker-(i * W + j).
    workers: tuple[PeerAddress, ...] = ()
    # The checkpoint to start from: the one a later attempt resumes from, else the
    # runconfig.checkpoint_path asked for, else none ("").
    resume_from: str = ""

    @property
    def pipelined(self) -> bool:
        """The whole model on one CS-2: no SwarmX, and the CS-2 is the job's one MemoryX (it
        holds every layer and its optimizer state, and serves the chief as MemoryX does)."""
        return not self.swarmx

    @property
    def fanout(self) -> int:
        """How many CS-2s each SwarmX serves."""
        return math.ceil(len(self.cs2) / len(self.swarmx))

    def swarmx_of_cs2(self, cs2_index: int) -> PeerAddress:
        return self.swarmx[cs2_index // self.fanout]

    def cs2_of_swarmx(self, swarmx_index: int) -> list[int]:
        """Indices of the CS-2s that stream through swarmx `swarmx_index` (may be empty)."""
        return [i for i in range(len(self.cs2)) if i // self.fanout == swarmx_index]

    def feeding_swarmx(self) -> list[int]:
        """Indices of the SwarmX replicas that have CS-2s behind them."""
        return [j for j in range(len(self.swarmx)) if self.cs2_of_swarmx(j)]

    def memoryx_of_layer(self, layer: int) -> PeerAddress:
        return self.memoryx[layer % len(self.memoryx)]

    def layers_of_memoryx(self, memoryx_index: int) -> list[int]:
        return [
            layer
            for layer in range(self.model.num_units)
            if layer % len(self.memoryx) == memoryx_index
        ]

    def others(self, chief_name: str) -> list[PeerAddress]:
        """Every replica except the chief (a pipelined CS-2 once, though it is also MemoryX)."""
        peers = (*self.cs2, *self.memoryx, *self.swarmx, *self.workers)
        named = {p.name: p for p in peers if p.name != chief_name}
        return list(named.values())

    @property
    def workers_per_cs2(self) -> int:
        return self.params.runconfig.num_workers_per_csx

    def worker_of_step(self, cs2_index: int, step: int) -> PeerAddress:
        """The input worker that feeds CS-2 `cs2_index` the batch of `step` (or evaluation
        batch `step`)."""
        per_cs2 = self.workers_per_cs2
        return self.workers[cs2_index * per_cs2 + step % per_cs2]

    def feeds(self, training: bool) -> bool:
        """Whether training (or evaluation) batches come from input workers: the section has
        a data_dir (the job then has workers); else the CS-2s make synthetic ones."""
        section = "train_input" if training else "eval_input"
        return bool(self.workers) and section in self.params.sections_read(self.mode)


def job_layout(topology: control_pb2.Topology) -> JobLayout:
    """Check the topology is complete and build the layout; raises ValueError otherwise."""
    params: Any = yaml.safe_load(topology.params_yaml or "{}") or {}
    if not isinstance(params, dict):
        raise ValueError("params_yaml is not a mapping")
    by_role: dict[str, list[PeerAddress]] = {"cs2": [], "memoryx": [], "swarmx": [], "worker": []}
    for peer in topology.peers:
        if peer.role in by_role:
            by_role[peer.role].append(PeerAddress(peer.name, peer.role, peer.index, peer.address))
    # A pipelined job (the plan's choice): no MemoryX and no SwarmX, one CS-2.
    pipelined = not by_role["memoryx"] and not by_role["swarmx"]
    optional = {"worker", "memoryx", "swarmx"} if pipelined else {"worker"}
    for role, peers in by_role.items():
        peers.sort(key=lambda p: p.index)
        if (not peers and role not in optional) or [p.index for p in peers] != list(
            range(len(peers))
        ):
            raise ValueError(f"topology has no contiguous {role}-0..{role}-K replicas")
    if pipelined and topology.num_csx != 1:
        raise ValueError(
            "a topology without MemoryX and SwarmX (pipelined) has one CS-2, not "
            f"{topology.num_csx}"
        )
    if len(by_role["cs2"]) != topology.num_csx:
        raise ValueError(
            f"topology lists {len(by_role['cs2'])} cs2 but num_csx={topology.num_csx}"
        )
    if topology.mode not in _MODES:
        raise ValueError(f"mode {common_pb2.Mode.Name(topology.mode)} is not run by the workers")
    try:
        typed = parse_params({"model": {}, **params})
        model = build_model(typed)
    except InvalidSpec as err:
        raise ValueError(err.message) from None
    workers = typed.input_workers(topology.num_csx, _MODES[topology.mode])
    if len(by_role["worker"]) != workers:
        raise ValueError(
            f"topology lists {len(by_role['worker'])} input workers but the params need "
            f"{workers} (num_workers_per_csx per CS-2 when the mode reads a data_dir)"
        )
    return JobLayout(
        job_id=topology.job_id,
        num_steps=topology.num_steps,
        model_dir=topology.model_dir,
        mode=_MODES[topology.mode],
        params=typed,
        model=model,
        cs2=tuple(by_role["cs2"]),
        # A pipelined CS-2 holds every layer: to the chief it is the job's one MemoryX.
        memoryx=tuple(by_role["cs2"] if pipelined else by_role["memoryx"]),
        swarmx=tuple(by_role["swarmx"]),
        workers=tuple(by_role["worker"]),
        resume_from=topology.resume_from or typed.runconfig.checkpoint_path or "",
    )
