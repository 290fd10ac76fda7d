"""Tiny model and optimizer params shared by the worker tests (unit and integration)."""

from __future__ import annotations

import copy
from typing import Any

FC = {
    "model": {"name": "fc_mnist", "input_size": 24, "hidden_sizes": [16, 12], "num_classes": 5},
    "train_input": {"batch_size": 12},
    "eval_input": {"batch_size": 10, "num_batches": 2},
    "runconfig": {"seed": 5},
}
GPT = {
    "model": {
        "name": "gpt2",
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_heads": 2,
        "max_position_embeddings": 8,
    },
    "train_input": {"batch_size": 8},
    "eval_input": {"batch_size": 4, "num_batches": 2},
    "runconfig": {"seed": 6},
}
SGD = {"optimizer_type": "sgd", "learning_rate": 0.1, "momentum": 0.9}
# eps 1e-5, not 1e-8: in tiny models some gradients are ~1e-8, where Adam's normalisation turns
# summation-order rounding into relative weight differences of 4e-5 (eps 1e-8) or 1.2e-5
# (eps 1e-6) between 1 and 2-4 CS-2s; a NumPy simulation of the sharded sums gives the same.
ADAMW = {
    "optimizer_type": "adamw",
    "learning_rate": 0.01,
    "eps": 1e-5,
    "weight_decay": 0.1,
    "warmup_steps": 2,
    "decay": "cosine",
    "max_gradient_norm": 0.5,
}
# Layer 0 is 2.3 MiB: three chunks on the wire, and products OpenBLAS splits between threads.
BIG_LAYER = {
    "model": {"name": "fc_mnist", "input_size": 600, "hidden_sizes": [1024], "num_classes": 5},
    "train_input": {"batch_size": 12},
    "optimizer": SGD,
    "runconfig": {"seed": 3},
}


def with_(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `base` with the given sections updated."""
    params = copy.deepcopy(base)
    for name, values in sections.items():
        params[name] = {**params.get(name, {}), **values}
    return params
