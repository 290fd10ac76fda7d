"""The shipped text corpus, byte-level tokens, and deterministic sequence sampling.

Tokens are the corpus's UTF-8 bytes (vocabulary 256). The first 90% of the bytes train, the
rest evaluates. A training batch of step k starts its sequences at offsets drawn from
(seed, step), so every replica draws the same batch; evaluation batches are fixed by the seed.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np

from appliance.workers.models.model import Batch, Labels

CORPUS_PATH = Path(__file__).parent / "data" / "corpus.txt"
TRAIN_FRACTION = 0.9
_TRAIN_STREAM = 1
_EVAL_STREAM = 3


def encode(text: str) -> Labels:
    """Byte-level tokenizer: one token per UTF-8 byte."""
    return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)


def decode(tokens: Labels) -> str:
    return bytes(tokens.astype(np.uint8).tolist()).decode(errors="replace")


@dataclasses.dataclass(frozen=True)
class TextCorpus:
    """Training and evaluation token streams."""

    train_tokens: Labels
    eval_tokens: Labels

    def train_batch(self, seed: int, step: int, batch_size: int, length: int) -> Batch:
        rng = np.random.default_rng([seed, _TRAIN_STREAM, step])
        return _windows(self.train_tokens, rng, batch_size, length)

    def eval_batch(self, seed: int, index: int, batch_size: int, length: int) -> Batch:
        rng = np.random.default_rng([seed, _EVAL_STREAM, index])
        return _windows(self.eval_tokens, rng, batch_size, length)


def _windows(tokens: Labels, rng: np.random.Generator, batch_size: int, length: int) -> Batch:
    if len(tokens) <= length + 1:
        raise ValueError(f"the corpus split has {len(tokens)} tokens; need > {length + 1}")
    starts = rng.integers(0, len(tokens) - length - 1, size=batch_size)
    index = starts[:, None] + np.arange(length)[None, :]
    return Batch(inputs=tokens[index], targets=tokens[index + 1])


@functools.cache
def load_corpus(path: Path = CORPUS_PATH) -> TextCorpus:
    """Read and split the corpus (cached per process)."""
    tokens = encode(path.read_text(encoding="utf-8"))
    split = int(len(tokens) * TRAIN_FRACTION)
    return TextCorpus(train_tokens=tokens[:split], eval_tokens=tokens[split:])
