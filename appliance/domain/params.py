"""Typed Model Zoo-style params: `model`, `train_input`, `eval_input`, `optimizer`, `runconfig`.

`parse_params` turns the parsed YAML mapping into frozen pydantic models or raises InvalidSpec
(field "params") with a sentence naming the key path, e.g.
"params: optimizer.learning_rate must be > 0, got -1". Which keys exist is said once, in
`params_keys.KNOWN_KEYS`: the keys the emulation implements are the fields below, the keys it
accepts but does not use are dropped here (each gives a warning: `params_keys.notes_of`), and
unknown keys are errors, all named in one, so a typo never silently falls back to a default.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

import pydantic
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveInt,
    StrictInt,
    StrictStr,
    Tag,
)
from pydantic_core import PydanticCustomError

from appliance.domain.errors import InvalidSpec
from appliance.domain.params_keys import screen
from appliance.domain.params_sentences import sentence_of, shown

MAX_SIZE = 1 << 20


def _check_size(value: int) -> int:
    if not 0 < value <= MAX_SIZE:
        raise PydanticCustomError("size_range", f"must be between 1 and {MAX_SIZE}")
    return value


Size = Annotated[int, AfterValidator(_check_size)]


def _check_path(value: str) -> str:
    if not value.startswith("/") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise PydanticCustomError(
            "path", "must be an absolute path on one line (the launcher makes yours absolute)"
        )
    return value


# What the coordinator checks is what the replicas read: a plain string (a YAML !!binary
# would pass a check of strings and become one in a replica), absolute, one line.
AbsolutePath = Annotated[StrictStr, Field(max_length=4096), AfterValidator(_check_path)]
MODEL_NAMES = ("fc_mnist", "gpt2")
MAX_STEPS = 10**9
MAX_SCHEDULERS = 64


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)
    # Keys a user may write that are spelled into fields before validation (not fields).
    SPELLINGS: ClassVar[frozenset[str]] = frozenset()


def _spell(data: Any, key: str, fields: tuple[str, ...], section: str) -> Any:
    """`data` with its list `key` spelled as `fields` (e.g. optimizer.betas as beta1, beta2)."""
    if not isinstance(data, dict) or key not in data:
        return data
    given = [f for f in fields if f in data]
    if given:
        raise ValueError(f"{section}.{key} and {section}.{given[0]}: give one of them")
    value = data[key]
    if not isinstance(value, list | tuple) or len(value) != len(fields):
        raise ValueError(
            f"{section}.{key} must be a list of {len(fields)} numbers, got {shown(value)}"
        )
    return {**{k: v for k, v in data.items() if k != key}, **dict(zip(fields, value, strict=True))}


class FcMnistModel(_Section):
    """An MLP on synthetic MNIST-shaped data: input -> hidden_sizes (ReLU) -> num_classes."""

    SPELLINGS = frozenset({"depth", "hidden_size"})

    name: Literal["fc_mnist"] = "fc_mnist"
    input_size: Size = 784
    hidden_sizes: tuple[Size, ...] = (256, 256)
    num_classes: Size = 10

    @pydantic.model_validator(mode="before")
    @classmethod
    def _depth_and_width(cls, data: Any) -> Any:
        """The Model Zoo's `depth` layers of `hidden_size` as hidden_sizes."""
        if not isinstance(data, dict) or not {"depth", "hidden_size"} & data.keys():
            return data
        if "hidden_sizes" in data:
            raise ValueError("model.hidden_sizes and model.depth/hidden_size: give one of them")
        depth, width = data.get("depth", 2), data.get("hidden_size", 256)
        for key, value in (("depth", depth), ("hidden_size", width)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1024:
                raise ValueError(
                    f"model.{key} must be an integer from 1 to 1024, got {shown(value)}"
                )
        rest = {k: v for k, v in data.items() if k not in ("depth", "hidden_size")}
        return {**rest, "hidden_sizes": [width] * depth}


class Gpt2Model(_Section):
    """A GPT-2-style byte-level decoder with a LM head tied to the token embedding."""

    name: Literal["gpt2"]
    hidden_size: Size = 128
    num_hidden_layers: Annotated[int, Field(gt=0, le=1024)] = 4
    num_heads: Annotated[int, Field(gt=0, le=1024)] = 4
    max_position_embeddings: Annotated[int, Field(gt=0, le=1 << 16)] = 128
    # The corpus is byte-level (ids < 256); a larger vocabulary has rows no token selects.
    vocab_size: Annotated[int, Field(ge=256, le=MAX_SIZE)] = 256
    # The MLP's inner width; None: 4 x hidden_size.
    filter_size: Size | None = None

    @property
    def inner_size(self) -> int:
        """The width of each block's MLP."""
        return self.filter_size or 4 * self.hidden_size

    @pydantic.model_validator(mode="after")
    def _heads_divide_hidden(self) -> Gpt2Model:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size ({self.hidden_size}) must be a multiple of "
                f"model.num_heads ({self.num_heads})"
            )
        return self


# The built-in data processors, by the model they feed (workers/data/ reads each format).
DATA_PROCESSORS: dict[str, tuple[str, ...]] = {
    "fc_mnist": ("MNISTDataProcessor", "NumpyDataProcessor"),
    "gpt2": ("GptHDF5DataProcessor",),
}
MAX_WORKERS_PER_CSX = 8
DEFAULT_EVAL_BATCHES = 4
_SECTIONS_BY_MODE = {
    "train": ("train_input",),
    "eval": ("eval_input",),
    "train_and_eval": ("train_input", "eval_input"),
}


def input_sections(mode: str) -> tuple[str, ...]:
    """The input sections a job of `mode` reads batches from (none for compile)."""
    return _SECTIONS_BY_MODE.get(mode, ())


def _check_processor(value: str) -> str:
    known = sorted({name for names in DATA_PROCESSORS.values() for name in names})
    if value not in known:
        own = "." in value  # the Model Zoo's `module.Class` of the user's own code
        raise PydanticCustomError(
            "processor",
            ("is your own code, which the input workers do not run (it would run with the "
             "appliance's privileges, not yours); " if own else "is not a data processor; ")
            + f"use one of {', '.join(known)}",
        )  # fmt: skip
    return value


class InputSection(_Section):
    """Batches: `batch_size` samples (sequences for gpt2) of `max_sequence_length` tokens,
    synthetic unless `data_dir` names a data set (read by the job's input workers)."""

    batch_size: Annotated[int, Field(gt=0, le=1 << 16)] = 32
    max_sequence_length: Annotated[int, Field(gt=1, le=1 << 16)] | None = None
    # Evaluation only: how many batches one evaluation runs over (None: one pass over the data
    # set when a data_dir is given, else DEFAULT_EVAL_BATCHES synthetic ones).
    num_batches: Annotated[int, Field(gt=0, le=1 << 16)] | None = None
    # The data set: a directory of files in the processor's format (the model's default
    # processor when none is named).
    data_dir: AbsolutePath | None = None
    data_processor: (
        Annotated[StrictStr, Field(max_length=200), AfterValidator(_check_processor)] | None
    ) = None
    # None: shuffled for training, in order for evaluation.
    shuffle: bool | None = None
    # The shuffle's seed (default runconfig.seed); each epoch's order follows from it.
    shuffle_seed: Annotated[int, Field(ge=0, lt=1 << 63)] | None = None
    drop_last_batch: bool = True
    # Only the data set's first num_examples samples.
    num_examples: Annotated[int, Field(gt=0, le=1 << 40)] | None = None
    # Reader threads in each input worker; batches each prepares ahead of need.
    num_workers: Annotated[int, Field(ge=0, le=16)] = 0
    prefetch_factor: Annotated[int, Field(gt=0, le=64)] = 2


LearningRate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class LrScheduler(_Section):
    """One of the Model Zoo's learning-rate schedulers; a list of them runs one after the other.

    Over its `total_iters` steps (the last one: until the end of the job) the rate goes from
    `initial_learning_rate` to `end_learning_rate`: linearly, along a half cosine, or
    exponentially (times `decay_rate` every `total_iters` steps; `staircase`: in whole steps);
    Constant keeps `learning_rate`. After its steps a scheduler holds its end rate.
    """

    scheduler: Literal["linear", "constant", "cosine", "exponential"]
    initial_learning_rate: LearningRate = 0.0
    end_learning_rate: LearningRate = 0.0
    learning_rate: LearningRate = 0.0
    total_iters: Annotated[int, Field(gt=0, le=MAX_STEPS)] | None = None
    decay_rate: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    staircase: bool = False

    @pydantic.field_validator("scheduler", mode="before")
    @classmethod
    def _known_spelling(cls, value: Any) -> Any:
        """Linear, LinearLR, cosine, CosineDecay, CosineDecayLR, ... as the Model Zoo spells
        them."""
        if not isinstance(value, str):
            return value
        name = value.strip().lower().removesuffix("lr").removesuffix("decay")
        return name if name in ("linear", "constant", "cosine", "exponential") else value


def _number_or_list(value: Any) -> str:
    return "tagged-list" if isinstance(value, list | tuple) else "tagged-number"


class OptimizerSection(_Section):
    """Applied by MemoryX. The learning rate follows warm-up then `decay` (see lr schedule), or
    the list of schedulers `learning_rate` gives."""

    SPELLINGS = frozenset({"betas"})

    optimizer_type: Literal["sgd", "adamw", "adam"] = "sgd"
    learning_rate: Annotated[
        Annotated[float, Field(gt=0, allow_inf_nan=False), Tag("tagged-number")]
        | Annotated[
            tuple[LrScheduler, ...],
            Field(min_length=1, max_length=MAX_SCHEDULERS),
            Tag("tagged-list"),
        ],
        Discriminator(_number_or_list),
    ] = 0.01
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    eps: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1e-8
    weight_decay: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    warmup_steps: NonNegativeInt = 0
    decay: Literal["constant", "linear", "cosine"] = "constant"
    # Steps from the end of warm-up to min_learning_rate; default: the rest of the job.
    decay_steps: PositiveInt | None = None
    min_learning_rate: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    # Clip the summed gradient by its global norm over all layers; None: no clipping.
    max_gradient_norm: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    @pydantic.field_validator("optimizer_type", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @pydantic.model_validator(mode="before")
    @classmethod
    def _betas(cls, data: Any) -> Any:
        return _spell(data, "betas", ("beta1", "beta2"), "optimizer")

    @pydantic.model_validator(mode="after")
    def _one_schedule(self) -> OptimizerSection:
        if isinstance(self.learning_rate, tuple):
            own = ("warmup_steps", "decay", "decay_steps", "min_learning_rate")
            given = [key for key in own if key in self.model_fields_set]
            if given:
                raise ValueError(
                    f"optimizer.{given[0]} applies to a numeric learning_rate; with a list of "
                    "schedulers put the warm-up or decay in the list"
                )
        return self

    @property
    def initial_learning_rate(self) -> float:
        """The rate of step 0 before warm-up: the number, or the first scheduler's."""
        if isinstance(self.learning_rate, float):
            return self.learning_rate
        first = self.learning_rate[0]
        return (
            first.learning_rate if first.scheduler == "constant" else first.initial_learning_rate
        )


ExecutionStrategy = Literal["weight_streaming", "pipeline"]
PIPELINE: ExecutionStrategy = "pipeline"


class RunConfig(_Section):
    """Seed, summary / checkpoint / eval cadence and the checkpoint to resume from."""

    seed: Annotated[int, Field(ge=0, lt=1 << 63)] = 0
    log_steps: PositiveInt | None = None
    checkpoint_steps: PositiveInt | None = None
    eval_steps: PositiveInt | None = None
    checkpoint_path: AbsolutePath | None = None
    # Stand in for --num_steps / model_dir when they are not given (the launcher, the client).
    max_steps: Annotated[StrictInt, Field(gt=0, le=MAX_STEPS)] | None = None
    model_dir: Annotated[StrictStr, Field(min_length=1, max_length=4096)] | None = None
    # As the Model Zoo: without checkpoint_path a job starts from the newest checkpoint in its
    # model dir; false starts over at step 0 (the earlier run's files set aside).
    autoload_last_checkpoint: bool = True
    # Input workers per CS-2 for a job that reads a data set (none for synthetic data).
    num_workers_per_csx: Annotated[int, Field(gt=0, le=MAX_WORKERS_PER_CSX)] = 1
    # As the Model Zoo 1.7's --execution_strategy: the whole model on one wafer (pipeline) or
    # weights streamed from MemoryX through SwarmX, layer by layer (weight_streaming). The
    # default streams: it runs any model size on any number of systems.
    execution_strategy: ExecutionStrategy = "weight_streaming"


class Params(_Section):
    """The whole params file, every section present (defaults filled in)."""

    model: FcMnistModel | Gpt2Model
    train_input: InputSection = InputSection()
    eval_input: InputSection = InputSection()
    optimizer: OptimizerSection = OptimizerSection()
    runconfig: RunConfig = RunConfig()

    @pydantic.model_validator(mode="after")
    def _processors_fit_the_model(self) -> Params:
        name = "gpt2" if isinstance(self.model, Gpt2Model) else "fc_mnist"
        for section in ("train_input", "eval_input"):
            processor = getattr(self, section).data_processor
            if processor is not None and processor not in DATA_PROCESSORS[name]:
                raise ValueError(
                    f"{section}.data_processor {processor} does not feed {name}; use "
                    + " or ".join(DATA_PROCESSORS[name])
                )
        return self

    def sections_read(self, mode: str) -> tuple[str, ...]:
        """The input sections whose data set a job of `mode` reads (those with a data_dir):
        training reads train_input's, evaluation eval_input's, as the Model Zoo's run.py does
        (a `--mode train` job never opens eval_input.data_dir)."""
        return tuple(s for s in input_sections(mode) if getattr(self, s).data_dir)

    def input_workers(self, num_csx: int, mode: str) -> int:
        """How many input workers a job of `mode` on `num_csx` CS-2s has (0: synthetic data)."""
        return num_csx * self.runconfig.num_workers_per_csx if self.sections_read(mode) else 0

    def model_digest(self) -> str:
        """sha256 of the `model` section: equal digests mean checkpoint-compatible shapes."""
        # Fields left at None are left out: adding one keeps the digests of older checkpoints.
        shape = self.model.model_dump(mode="json", exclude_none=True)
        text = json.dumps(shape, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def parse_params(params: Mapping[str, Any]) -> Params:
    """Validate the parsed params mapping; raises InvalidSpec naming the first bad key."""
    sections = {k: v for k, v in params.items() if v is not None}
    model = sections.get("model") or {}
    if not isinstance(model, Mapping):
        raise InvalidSpec("params: model must be a mapping", field="params")
    name = model.get("name", "fc_mnist")
    if name not in MODEL_NAMES:
        raise InvalidSpec(
            f"params: model.name {shown(name)} is not known; use one of {', '.join(MODEL_NAMES)}",
            field="params",
        )
    screened = screen({k: v for k, v in sections.items() if isinstance(v, Mapping)}, name)
    kept = {**sections, **screened.sections}
    model_type: type[_Section] = Gpt2Model if name == "gpt2" else FcMnistModel
    try:
        typed_model = model_type.model_validate(kept.get("model", {}))
    except pydantic.ValidationError as err:
        raise InvalidSpec(sentence_of(err, "model"), field="params") from None
    try:
        return Params.model_validate({**kept, "model": typed_model})
    except pydantic.ValidationError as err:
        raise InvalidSpec(sentence_of(err, ""), field="params") from None
