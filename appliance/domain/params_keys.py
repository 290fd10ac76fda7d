"""Every params key the appliance knows, in one table: what each does here.

A Model Zoo params file (the Cerebras workshop's fc_mnist, the Model Zoo's fc_mnist and GPT-2
configs) carries keys this emulation implements and keys it has no use for. `KNOWN_KEYS` says
which is which: a key it implements is a field of the typed params (`domain/params.py`); a key
it accepts but does not use gives one warning line that names it and says what the emulation
does instead (unless its value asks for what the emulation does anyway, e.g.
`mixed_precision: false`). No key of those files is refused, none silently ignored; a key not in
the table is unknown, and every unknown key is reported in one error, each with the closest
known key. The README's table of params keys is checked against this one
(tests/unit/domain/test_params_keys.py). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
from collections.abc import Mapping
from typing import Any

from appliance.domain.display import printable
from appliance.domain.errors import InvalidSpec
from appliance.domain.reasons import Reason, ReasonCode, said

MAX_UNKNOWN_SHOWN = 10  # unknown keys one error lists; the rest are counted
_MAX_KEY_SHOWN = 64  # characters of one unknown key shown (a key may be anything a file holds)
_ANY = object()  # no value makes the key quiet: it always warns


class Treatment(enum.Enum):
    """What the appliance does with a key."""

    USED = "used"  # implemented: a field of the typed params
    IGNORED = "ignored"  # accepted with one warning saying what the emulation does instead


@dataclasses.dataclass(frozen=True)
class KnownKey:
    """One params key: `path` is `section.key`; `here` says what the appliance does with it."""

    path: str
    treatment: Treatment
    here: str
    # Only for these models (empty: any model).
    models: frozenset[str] = frozenset()
    # The value for which an ignored key asks for what the emulation does anyway: no warning.
    quiet: object = _ANY

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.path.split(".", 1)[1]

    def warns_for(self, value: Any) -> bool:
        """An accepted key given this value gets a warning."""
        if self.treatment is Treatment.USED:
            return False
        return self.quiet is _ANY or not _same(value, self.quiet)


def _same(value: Any, expected: object) -> bool:
    if isinstance(expected, bool) or isinstance(value, bool):
        return value is expected
    if isinstance(expected, str):
        return isinstance(value, str) and value.strip().lower() == expected
    if isinstance(expected, float):
        return isinstance(value, int | float) and float(value) == expected
    return bool(value == expected)


FC, GPT2 = frozenset({"fc_mnist"}), frozenset({"gpt2"})
_DETERMINISTIC = "no dropout: runs are deterministic, so a resumed run is bit-exact"
_FLOAT32 = "the emulation computes in float32 throughout"
_NO_LOSS_SCALE = "no loss scaling: float32 gradients need none"
_PERSISTENT = "input workers live as long as the job"
_INPUT_SEED = "the data's order draws from shuffle_seed (default runconfig.seed)"
_IMAGE_SIZE = "an image is model.input_size values, whatever its shape"


def _used(path: str, here: str, models: frozenset[str] = frozenset()) -> KnownKey:
    return KnownKey(path, Treatment.USED, here, models)


def _ignored(
    path: str, here: str, quiet: object = _ANY, models: frozenset[str] = frozenset()
) -> KnownKey:
    return KnownKey(path, Treatment.IGNORED, here, models, quiet)


def _input_keys(section: str) -> list[KnownKey]:
    return [
        _used(f"{section}.batch_size", "samples in one global batch, split across the CS-2s"),
        _used(
            f"{section}.max_sequence_length",
            "gpt2: tokens per sequence (default model.max_position_embeddings)",
        ),
        _used(
            f"{section}.num_batches",
            "batches one evaluation reads (default: its data set once, else 4)",
        ),
        _used(
            f"{section}.data_dir",
            "the data set the input workers read (none: synthetic data, or the shipped text "
            "corpus for gpt2)",
        ),
        _used(
            f"{section}.data_processor",
            "the data set's format: MNISTDataProcessor (IDX files) or NumpyDataProcessor "
            "(.npz shards) for fc_mnist, GptHDF5DataProcessor for gpt2",
        ),
        _used(f"{section}.shuffle", "a new order each epoch (default: train yes, eval no)"),
        _used(f"{section}.shuffle_seed", "the order's seed (default runconfig.seed)"),
        _used(f"{section}.drop_last_batch", "drop an epoch's last, short batch (default true)"),
        _used(f"{section}.num_examples", "only the data set's first this many samples"),
        _used(f"{section}.num_workers", "reader threads in each input worker (default 0: one)"),
        _used(f"{section}.prefetch_factor", "batches each input worker prepares ahead (2)"),
        _ignored(f"{section}.persistent_workers", _PERSISTENT, quiet=True),
        _ignored(f"{section}.seed", _INPUT_SEED),
        _ignored(f"{section}.image_size", _IMAGE_SIZE),
    ]


KNOWN_KEYS: tuple[KnownKey, ...] = (
    *_input_keys("train_input"),
    *_input_keys("eval_input"),
    _used("model.name", "fc_mnist or gpt2 (default fc_mnist; an example's run.py sets its own)"),
    _ignored("model.mixed_precision", _FLOAT32, quiet=False),
    _used("model.input_size", "inputs of the MLP (default 784)", FC),
    _used("model.hidden_sizes", "widths of the hidden layers (default [256, 256])", FC),
    _used("model.depth", "hidden layers of width model.hidden_size (as the Model Zoo's)", FC),
    _used(
        "model.hidden_size",
        "fc_mnist: width of each of model.depth hidden layers; gpt2: the model width",
    ),
    _used("model.num_classes", "outputs of the MLP (default 10)", FC),
    _ignored("model.dropout", _DETERMINISTIC, quiet=0.0, models=FC),
    _ignored("model.activation_fn", "the hidden layers use ReLU", quiet="relu", models=FC),
    _used("model.num_hidden_layers", "transformer blocks", GPT2),
    _used("model.num_heads", "attention heads (must divide model.hidden_size)", GPT2),
    _used("model.max_position_embeddings", "learned positions", GPT2),
    _used(
        "model.vocab_size",
        "rows of the token embedding, at least 256 (the corpus is byte-level: ids < 256)",
        GPT2,
    ),
    _used("model.filter_size", "width of the MLP of each block (default 4 x hidden)", GPT2),
    _ignored("model.dropout_rate", _DETERMINISTIC, quiet=0.0, models=GPT2),
    _ignored("model.attention_dropout_rate", _DETERMINISTIC, quiet=0.0, models=GPT2),
    _ignored(
        "model.position_embedding_type", "positions are learned", quiet="learned", models=GPT2
    ),
    _ignored(
        "model.share_embedding_weights",
        "the LM head is tied to the token embedding",
        quiet=True,
        models=GPT2,
    ),
    _ignored("model.layer_norm_epsilon", "LayerNorm uses epsilon 1e-5", quiet=1e-5, models=GPT2),
    _ignored(
        "model.loss_scaling", "the loss is the mean over tokens", quiet="num_tokens", models=GPT2
    ),
    _ignored("model.loss_weight", "the loss is not weighted", quiet=1.0, models=GPT2),
    _ignored(
        "model.attention_type",
        "attention is scaled dot-product, causal",
        quiet="scaled_dot_product",
        models=GPT2,
    ),
    _ignored(
        "model.use_projection_bias_in_attention",
        "the QKV projection has a bias",
        quiet=True,
        models=GPT2,
    ),
    _ignored(
        "model.use_ffn_bias_in_attention",
        "the attention output projection has a bias",
        quiet=True,
        models=GPT2,
    ),
    _ignored("model.use_ffn_bias", "the MLP's layers have biases", quiet=True, models=GPT2),
    _ignored("model.use_bias_in_output", "the tied LM head has no bias", quiet=False, models=GPT2),
    _ignored(
        "model.nonlinearity", "the MLP uses GELU (tanh approximation)", quiet="gelu", models=GPT2
    ),
    _used("optimizer.optimizer_type", "SGD, Adam or AdamW, any case (default sgd)"),
    _used(
        "optimizer.learning_rate",
        "a number (peak, with warmup_steps and decay), or the Model Zoo's list of schedulers "
        "(Linear, Constant, Cosine, Exponential), one after the other",
    ),
    _used("optimizer.momentum", "SGD momentum (default 0)"),
    _used("optimizer.betas", "Adam's [beta1, beta2]"),
    _used("optimizer.beta1", "Adam's beta1 (default 0.9)"),
    _used("optimizer.beta2", "Adam's beta2 (default 0.999)"),
    _used("optimizer.eps", "Adam's epsilon (default 1e-8)"),
    _used("optimizer.weight_decay", "decoupled, matrices only (default 0)"),
    _used("optimizer.warmup_steps", "linear warm-up of a numeric learning_rate"),
    _used("optimizer.decay", "constant, linear or cosine after warm-up"),
    _used("optimizer.decay_steps", "steps of the decay (default: the rest of the job)"),
    _used("optimizer.min_learning_rate", "where the decay ends (default 0)"),
    _used("optimizer.max_gradient_norm", "clip by the global norm of all gradients"),
    _ignored("optimizer.loss_scaling_factor", _NO_LOSS_SCALE, quiet=1.0),
    _ignored("optimizer.initial_loss_scale", _NO_LOSS_SCALE),
    _ignored("optimizer.max_loss_scale", _NO_LOSS_SCALE),
    _used("runconfig.max_steps", "steps to run when --num_steps is not given (it wins)"),
    _used("runconfig.seed", "weights' initialisation and the data's draw (default 0)"),
    _used("runconfig.log_steps", "cadence of the TensorBoard scalars and metrics.jsonl"),
    _used("runconfig.checkpoint_steps", "cadence of checkpoint_<step>.npz in the model dir"),
    _used(
        "runconfig.eval_steps",
        "train_and_eval: evaluate every this many steps; --mode eval: batches to evaluate",
    ),
    _used("runconfig.checkpoint_path", "the checkpoint to start from (--checkpoint_path)"),
    _used(
        "runconfig.autoload_last_checkpoint",
        "false: start over at step 0 instead of from the model dir's newest checkpoint",
    ),
    _used(
        "runconfig.model_dir",
        "the output directory when --model_dir is not given (resolved by the launcher and "
        "the Python client against your working directory)",
    ),
    _used(
        "runconfig.num_workers_per_csx",
        "input workers per CS-2 when a data_dir is given (default 1)",
    ),
    _used(
        "runconfig.execution_strategy",
        "pipeline (the whole model on one CS-2) or weight_streaming (the default)",
    ),
    _ignored(
        "runconfig.save_losses",
        "losses are always written (TensorBoard, metrics.jsonl)",
        quiet=True,
    ),
    _ignored(
        "runconfig.save_initial_checkpoint",
        "no checkpoint at step 0: the first is written at runconfig.checkpoint_steps or at the "
        "end",
        quiet=False,
    ),
)

_BY_PATH: dict[str, KnownKey] = {k.path: k for k in KNOWN_KEYS}


@dataclasses.dataclass(frozen=True)
class ParamsNote:
    """A key accepted but not used, and what the emulation does instead: one warning line."""

    key: str
    instead: str

    @property
    def reason(self) -> Reason:
        """The note as the job's event at submit records it."""
        return said(ReasonCode.PARAMS_WARNING, key=self.key, instead=self.instead)

    def __str__(self) -> str:
        return self.reason.message


@dataclasses.dataclass(frozen=True)
class Screened:
    """The params' sections with only the keys the typed params take, and the notes."""

    sections: dict[str, dict[str, Any]]
    notes: tuple[ParamsNote, ...]


def known_key(path: str, model: str) -> KnownKey | None:
    """The table's row for `path` in params of `model`, or None."""
    found = _BY_PATH.get(path)
    return found if found is not None and (not found.models or model in found.models) else None


def screen(sections: Mapping[str, Mapping[Any, Any]], model: str) -> Screened:
    """Split every section's keys: used ones are kept, accepted ones become notes (when their
    value warns), unknown ones are all refused in one InvalidSpec, each with a suggestion."""
    kept: dict[str, dict[str, Any]] = {}
    notes: list[ParamsNote] = []
    unknown: list[str] = []
    for section, values in sections.items():
        kept[section] = {}
        for key, value in values.items():
            row = known_key(f"{section}.{key}", model) if isinstance(key, str) else None
            if row is None:
                unknown.append(_unknown(section, key, model))
            elif row.treatment is Treatment.USED:
                kept[section][key] = value
            elif row.warns_for(value):
                notes.append(ParamsNote(row.path, row.here))
    if unknown:
        raise InvalidSpec(_unknown_sentence(unknown), field="params")
    return Screened(kept, tuple(notes))


def notes_of(params: Mapping[str, Any], model_dir: str | None = None) -> tuple[ParamsNote, ...]:
    """The warnings of checked params (a mapping validate_params accepted), for a job given
    `model_dir` ("": none, the appliance places it; None: not a job, e.g. a compile)."""
    model = params.get("model") or {}
    name = model.get("name", "fc_mnist") if isinstance(model, Mapping) else "fc_mnist"
    sections = {k: v for k, v in params.items() if isinstance(v, Mapping)}
    notes = screen(sections, str(name)).notes
    if model_dir == "" and runconfig_value(params, "model_dir") is not None:
        notes += (ParamsNote("runconfig.model_dir", _MODEL_DIR_UNUSED),)
    return notes


_MODEL_DIR_UNUSED = (
    "the launcher and the Python client resolve it on your machine; a job submitted without "
    "model_dir writes to your directory on the appliance"
)


def runconfig_value(params: Mapping[str, Any], key: str) -> Any:
    """`runconfig.<key>` of parsed params, or None (no runconfig, or not a mapping)."""
    runconfig = params.get("runconfig")
    return runconfig.get(key) if isinstance(runconfig, Mapping) else None


def _unknown(section: str, key: Any, model: str) -> str:
    shown = printable(str(key))
    if len(shown) > _MAX_KEY_SHOWN:
        shown = shown[:_MAX_KEY_SHOWN] + "..."
    path = f"{section}.{shown}"
    if not isinstance(key, str):
        return path
    elsewhere = [k.path for k in KNOWN_KEYS if k.key == key and known_key(k.path, model)]
    if elsewhere:
        return f"{path} (it belongs in {elsewhere[0]})"
    here = [k.key for k in KNOWN_KEYS if k.section == section and known_key(k.path, model)]
    close = difflib.get_close_matches(key[: _MAX_KEY_SHOWN * 2], here, n=1, cutoff=0.6)
    return f"{path} (did you mean {close[0]}?)" if close else path


def _unknown_sentence(unknown: list[str]) -> str:
    shown = ", ".join(unknown[:MAX_UNKNOWN_SHOWN])
    more = len(unknown) - MAX_UNKNOWN_SHOWN
    if more > 0:
        shown += f" and {more} more"
    if len(unknown) == 1:
        return f"params: unknown key {shown}; check the spelling or remove it"
    return f"params: unknown keys {shown}; check the spelling or remove them"
