"""What a job needs on a CS-2's wafer, in each execution mode (pure arithmetic).

A CS-2 has WAFER_BYTES of on-chip SRAM (40 GB, the talks' figure). Everything here is float32,
4 bytes a number, the emulation's one precision.

- Pipelined: the whole model lives on the wafer: its weights, their gradients, the optimizer
  state (`model_shapes.OPTIMIZER_STATE_COPIES` copies of the weights: Adam's two moments), and
  the activations of the whole batch. With Adam that is 16 bytes a parameter before any
  activation, so "up to about a billion parameters" (the article) is 16 GB of the 40, the rest
  left for a training batch's activations.
- Weight streaming, per CS-2: the activations of its shard of the batch (ceil(batch /
  num_csx) samples), the weights of the two largest units (the one computed on and the next,
  prefetched: what a streaming CS-2 replica holds at most) and the largest unit's gradient
  (it leaves for SwarmX as soon as it is computed). No optimizer state: MemoryX keeps it.

The activation model: every unit's input is kept, per sample, for the backward pass. GPT: one
max_sequence_length x hidden_size tensor per unit (the embeddings' output, each block's output;
the final layer norm's input is the last block's); the logits (max_sequence_length x
vocab_size, larger than all of those for GPT-2 small) are recomputed from the final norm's
output in backward, as activation checkpointing does, not kept. fc_mnist: each layer's input
width plus the logits. It leaves out what a real
kernel also keeps (attention scores, the MLP's inner width), so it is a lower bound on what a
batch needs.
"""

from __future__ import annotations

import dataclasses
import math

from appliance.domain.model_shapes import BYTES_PER_PARAM, OPTIMIZER_STATE_COPIES, unit_shapes
from appliance.domain.params import PIPELINE, FcMnistModel, Gpt2Model, Params
from appliance.domain.spec import JobSpec

WAFER_BYTES = 40 * 10**9  # a CS-2's 40 GB of on-chip SRAM
MAX_WAFER_BYTES = 10**15  # a bound on a configured wafer (a petabyte), against typos
ACTIVATION_BYTES = 4  # float32
WEIGHT_STREAMING = "weight_streaming"
# Units a streaming CS-2 holds at once: the one it computes on and the prefetched next one.
STREAMED_UNITS_HELD = 2


@dataclasses.dataclass(frozen=True)
class WaferNeed:
    """Bytes one CS-2's wafer must hold for a job."""

    weights: int
    gradients: int
    optimizer_state: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.activations


def gigabytes(count: int) -> str:
    """Bytes in decimal GB, one decimal, as the talks say a wafer's size: `40.0 GB`."""
    return f"{count / 10**9:.1f} GB"


def describe(need: WaferNeed) -> str:
    """Where the bytes go: `weights 5.3 GB, gradients 5.3 GB, optimizer state 10.5 GB, ...`."""
    return (
        f"weights {gigabytes(need.weights)}, gradients {gigabytes(need.gradients)}, "
        f"optimizer state {gigabytes(need.optimizer_state)}, "
        f"activations {gigabytes(need.activations)}"
    )


def execution_strategy_of(spec: JobSpec) -> str:
    """`pipeline` or `weight_streaming`, as the job's params chose (and its plan follows: a
    pipelined plan has no MemoryX and no SwarmX); "" without params (list views)."""
    if not spec.params_yaml:
        return ""
    runconfig = spec.params.get("runconfig")
    value = runconfig.get("execution_strategy") if isinstance(runconfig, dict) else None
    return PIPELINE if value == PIPELINE else WEIGHT_STREAMING


def wafer_line(mode: str, need: WaferNeed, wafer_bytes: int) -> str:
    """`wafer (pipelined): 47.9 GB of 40.0 GB - does not fit (weights 5.3 GB, ...)`."""
    fits = "fits" if need.total <= wafer_bytes else "does not fit"
    return (
        f"wafer ({mode}): {gigabytes(need.total)} of {gigabytes(wafer_bytes)} - {fits} "
        f"({describe(need)})"
    )


def sequence_length(params: Params) -> int:
    """Tokens per GPT sample: train_input.max_sequence_length, else the model's positions."""
    assert isinstance(params.model, Gpt2Model)
    return params.train_input.max_sequence_length or params.model.max_position_embeddings


def activations_per_sample(params: Params) -> int:
    """Bytes of activations one training sample keeps for backward (the module's model)."""
    model = params.model
    if isinstance(model, FcMnistModel):
        widths = [model.input_size, *model.hidden_sizes, model.num_classes]
        return sum(widths) * ACTIVATION_BYTES
    seq = sequence_length(params)
    # Embeddings' output + each block's output (the final norm reads the last); the logits are
    # recomputed in backward, not kept.
    return (1 + model.num_hidden_layers) * seq * model.hidden_size * ACTIVATION_BYTES


def _unit_bytes(params: Params) -> list[int]:
    return [
        sum(math.prod(shape) for shape in unit.values()) * BYTES_PER_PARAM
        for unit in unit_shapes(params)
    ]


def wafer_needs(params: Params, num_csx: int, execution_strategy: str) -> WaferNeed:
    """What one CS-2 of a `num_csx` job holds in the given execution strategy."""
    units = _unit_bytes(params)
    batch = params.train_input.batch_size
    if execution_strategy == PIPELINE:
        weights = sum(units)
        copies = OPTIMIZER_STATE_COPIES[params.optimizer.optimizer_type]
        return WaferNeed(
            weights=weights,
            gradients=weights,
            optimizer_state=weights * copies,
            activations=batch * activations_per_sample(params),
        )
    largest = sorted(units, reverse=True)
    shard = math.ceil(batch / max(1, num_csx))
    return WaferNeed(
        weights=sum(largest[:STREAMED_UNITS_HELD]),
        gradients=largest[0],
        optimizer_state=0,
        activations=shard * activations_per_sample(params),
    )
