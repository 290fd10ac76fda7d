"""The numerics promise of appliance.workers.models.numerics: the same bits wherever the arrays sit
and whatever BLAS thread count the process has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import threadpoolctl

from appliance.domain.params import parse_params
from appliance.workers.models.model import (
    Batch,
    StreamedModel,
    Tensors,
    backward_units,
    forward_units,
)
from appliance.workers.models.model_catalog import build_model
from appliance.workers.models.numerics import (
    BLAS_THREAD_VARIABLES,
    one_blas_thread,
    pin_blas_threads,
)
from appliance.workers.models.reference import ReferenceTrainer
from appliance.workers.transport.tensors import decode_layer, encode_layer
from appliance.workers.transport.wire import parse_chunk, serialize_chunk
from tests.model_specs import ADAMW, BIG_LAYER, FC, GPT, SGD, with_
from tests.unit.workers.transport.test_tensor_codec import message_at

CACHE_LINE = 64
ROOT = Path(__file__).resolve().parents[3]


def placed(array: np.ndarray, offset: int) -> np.ndarray:
    """A writeable copy of `array` at the last multiple of its item size at or before `offset`
    bytes past a cache-line boundary."""
    offset -= offset % array.itemsize
    buffer = np.empty(array.nbytes + 2 * CACHE_LINE, dtype=np.uint8)
    start = -buffer.ctypes.data % CACHE_LINE + offset
    out = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    assert out.ctypes.data % CACHE_LINE == offset
    return out


def placed_tensors(tensors: Tensors, offset: int) -> Tensors:
    return {name: placed(array, offset) for name, array in tensors.items()}


class PlacedBatches:
    """A model whose training batches are placed at `offset` (it forwards everything else)."""

    def __init__(self, model: StreamedModel, offset: int) -> None:
        self._model, self._offset = model, offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def train_batch(self, step: int) -> Batch:
        batch = self._model.train_batch(step)
        return Batch(placed(batch.inputs, self._offset), placed(batch.targets, self._offset))


def train_placed(spec: dict[str, Any], offset: int, steps: int = 2) -> list[Tensors]:
    """Train with every weight, optimizer slot and batch array at `offset` (placed again before
    each step: an update allocates new arrays); the final weights."""
    params = parse_params(spec)
    trainer = ReferenceTrainer(params, steps, model=PlacedBatches(build_model(params), offset))
    for _ in range(steps):
        trainer.weights = [placed_tensors(w, offset) for w in trainer.weights]
        trainer.states = [
            {slot: placed_tensors(t, offset) for slot, t in state.items()}
            for state in trainer.states
        ]
        trainer.train_step()
    return trainer.weights


@pytest.mark.parametrize("spec", [FC, GPT], ids=["fc_mnist", "gpt2"])
@pytest.mark.parametrize("optimizer", [SGD, ADAMW], ids=["sgd", "adamw"])
def test_training_gives_the_same_bits_at_every_aligned_place_in_a_cache_line(
    spec: dict[str, Any], optimizer: dict[str, Any]
) -> None:
    """Alignment beyond the item size is the allocator's choice (16 bytes from glibc, 64 from
    jemalloc for large blocks). NumPy and OpenBLAS happen not to depend on it: if a release
    starts to (a SIMD loop peeling to an alignment, say), this fails."""
    spec = with_(spec, optimizer=optimizer)
    expected = train_placed(spec, 0)
    for offset in range(4, CACHE_LINE, 4):
        for unit, (got, want) in enumerate(zip(train_placed(spec, offset), expected, strict=True)):
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], f"{name}_{unit} @{offset}")


def received(tensors: Tensors, unit: int, step: int, offset: int) -> Tensors:
    """`tensors` sent as a CS-2 gets them: encoded, in messages that start `offset` bytes past a
    4-byte boundary, parsed and decoded."""
    chunks = [
        parse_chunk(message_at(serialize_chunk(chunk), offset))
        for chunk in encode_layer(step, unit, 0, tensors)
    ]
    return decode_layer(chunks).tensors


@pytest.mark.parametrize("step", [0, 1, 128])  # the step's varint moves every tensor's bytes
def test_a_step_on_weights_received_over_the_wire_is_the_reference_step(step: int) -> None:
    """What failed on AVX-512 BLAS kernels: misaligned weights made NumPy hand BLAS a copy in
    another layout, which those kernels round differently (appliance.workers.models.numerics)."""
    trainer = ReferenceTrainer(parse_params(with_(GPT, optimizer=SGD)), 1)
    model, batch = trainer.model, trainer.model.train_batch(0)
    normalizer = batch.num_samples * model.predictions_per_sample

    def gradients(weights: dict[int, Tensors]) -> dict[int, Tensors]:
        with one_blas_thread():
            outputs, caches = forward_units(model, weights, batch.inputs)
            head = model.head(outputs, weights, batch.targets, normalizer, need_grad=True)
            return dict(backward_units(model, weights, caches, head))

    expected = gradients(dict(enumerate(trainer.weights)))
    for offset in range(4):
        weights = {u: received(w, u, step, offset) for u, w in enumerate(trainer.weights)}
        for unit, grads in gradients(weights).items():
            for name, grad in grads.items():
                np.testing.assert_array_equal(grad, expected[unit][name], f"{name}_{unit}")


def final_weights(trainer: ReferenceTrainer) -> bytes:
    return b"".join(v.tobytes() for w in trainer.weights for v in w.values())


def test_the_reference_gives_the_same_bits_whatever_blas_threads_the_process_has() -> None:
    results = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            trainer = ReferenceTrainer(parse_params(BIG_LAYER), 2)
            trainer.train_step()  # both entry points pin BLAS to one thread
            trainer.train()
        results.append(final_weights(trainer))
    assert results[0] == results[1]


def test_one_blas_thread_restores_the_thread_count() -> None:
    if not any(i["user_api"] == "blas" for i in threadpoolctl.threadpool_info()):
        pytest.skip("this NumPy loaded no BLAS that threadpoolctl can limit")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with one_blas_thread():
            inside = threadpoolctl.threadpool_info()
        after = threadpoolctl.threadpool_info()
    blas = [i for i in inside if i["user_api"] == "blas"]
    assert blas and all(i["num_threads"] == 1 for i in blas)
    assert all(i["num_threads"] == 2 for i in after if i["user_api"] == "blas")


def test_replicas_pin_blas_threads_whatever_the_environment_asked() -> None:
    environ = {"OPENBLAS_NUM_THREADS": "2", "PATH": os.defpath}
    pin_blas_threads(environ)
    assert {v: environ[v] for v in BLAS_THREAD_VARIABLES} == dict.fromkeys(
        BLAS_THREAD_VARIABLES, "1"
    )
    assert environ["PATH"] == os.defpath


def test_a_blas_loaded_before_the_pin_is_limited_too() -> None:
    """A replica's second line of defence: NumPy loaded (with two threads) before the pin."""
    script = (
        "import numpy, threadpoolctl\n"
        "from appliance.workers.models.numerics import limit_loaded_blas\n"
        "def threads(): return {i['num_threads'] for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'}\n"
        "before = threads(); limit_loaded_blas(); print(sorted(before), sorted(threads()))\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[2]", "[1]"], done.stdout  # threads before, after
