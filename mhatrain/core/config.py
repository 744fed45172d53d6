"""The config tree: YAML → dataclasses, `--set section.key=value` overrides, checks.

Every check runs at load time, before any data is read or any model is built, and every
failure is one `ConfigError` line naming the key and the file it came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import yaml

from .errors import ConfigError
from .files import atomic_write_text


def _choices(*values: str) -> dict:
    return {"choices": values}


ATTENTION_KINDS = ("enc_self", "dec_self", "cross")  # encoder self-, decoder self-, encoder-decoder attention (§3.2.3)


@dataclass
class HeadGatesConfig:
    """Learned head gates: a hard-concrete gate per head (Louizos et al. 2018) and an L0 penalty, with
    which Voita et al. 2019 prune heads. Their recipe's temperature and stretch are the defaults.

    lr_scale: Adam moves a log α by about its learning rate per update, and a gate goes from open
    (log α = 3) to closed (−2.4) only after a change of 5.4. At the weights' learning rate (the
    Noam schedule, ~5e-4 after warmup on the Multi30k base config) that takes over 10,000 updates of
    steady pressure; with log α's rate 30 times the schedule's, the gates decide in the first few
    hundred updates of a fine-tune, while the weights keep theirs."""

    l0: float = 0.0  # λ: the loss adds λ · Σ P(gate ≠ 0) over the gated heads to the cross-entropy per target token
    temperature: float = 0.33  # β of the hard-concrete distribution: lower is closer to a 0/1 gate
    stretch: list[float] = field(
        default_factory=lambda: [-0.1, 1.1]
    )  # [γ, ζ]: the gate's sigmoid is stretched to (γ, ζ), then clipped to [0, 1]
    kinds: list[str] = field(
        default_factory=lambda: list(ATTENTION_KINDS), metadata=_choices(*ATTENTION_KINDS)
    )  # the kinds of attention whose heads get gates
    lr_scale: float = 30.0  # log α's learning rate, as a multiple of the schedule's (1: the weights' own)


@dataclass
class HeadsPerLayer:
    """How many heads each attention module has, layer by layer from the bottom (a pruned model's).
    Every head has the model's head size (model.d_head, or d_model / n_heads); an empty list: n_heads in every layer."""

    enc_self: list[int] = field(default_factory=list)  # encoder self-attention, one count per encoder layer
    dec_self: list[int] = field(default_factory=list)  # decoder self-attention, one count per decoder layer
    cross: list[int] = field(default_factory=list)  # encoder-decoder attention, one count per decoder layer


@dataclass
class ModelConfig:
    d_model: int = 512  # width of every residual stream
    n_heads: int = 8  # attention heads per layer
    d_head: int | None = None  # dimensions per head (d_k = d_v); null = d_model / n_heads, as in the paper
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    n_encoder_layers: int = 6  # encoder stack depth (the paper's N)
    n_decoder_layers: int = 6  # decoder stack depth
    dropout: float = 0.1  # on sublayer outputs and embeddings+positions
    attention_dropout: float = 0.0  # on attention probabilities
    norm: str = field(default="post", metadata=_choices("post", "pre"))  # paper: post-LayerNorm
    tie_embeddings: bool = True  # share src/tgt embeddings and the output projection
    max_positions: int = 1024  # length of the sinusoidal position table
    head_gates: HeadGatesConfig | None = None  # learned head gates with an L0 penalty (null: none, the paper's model)
    heads_per_layer: HeadsPerLayer | None = (
        None  # heads of each layer per kind, each n_heads' head size (null: n_heads everywhere)
    )


@dataclass
class DataConfig:
    dataset: str = "bentrevett/multi30k"  # Hugging Face hub id, used when local_dir is null
    dataset_config: str | None = None  # hub config name (e.g. "de-en" for wmt14)
    local_dir: str | None = None  # read {split}.{lang}[.gz] or {split}.jsonl[.gz] from here instead
    src_lang: str = "en"  # source language code: a hub field name, a local file suffix
    tgt_lang: str = "de"  # target language code
    train_split: str = "train"  # split names in the source (local files: also their release names)
    valid_split: str = "validation"  # local files: also found as val, valid or dev
    test_split: str = "test"  # local files: also found as test_2016_flickr
    max_length: int = 128  # drop training pairs longer than this many subword tokens (either side)
    max_train_examples: int = 0  # 0 = all; >0 keeps the first N pairs (for quick experiments)
    vocab_size: int = 8000  # joint SentencePiece vocabulary
    tokenizer_type: str = field(default="unigram", metadata=_choices("unigram", "bpe"))  # SentencePiece model type
    character_coverage: float = 1.0  # share of characters the SentencePiece model must cover
    tokenizer_sample: int = 1_000_000  # sentences sampled to train the tokenizer (0 = all)
    cache_dir: str = "~/.cache/mhatrain"  # where trained tokenizers are cached for reuse


@dataclass
class TrainConfig:
    seed: int = 1  # seeds initialisation, dropout and the batch order
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = field(
        default="bf16", metadata=_choices("bf16", "fp16", "fp32")
    )  # autocast dtype; fp16 scales the loss
    threads: int = 0  # CPU threads for torch (0 = torch's default)
    max_tokens: int = 4096  # token budget per batch: sentences × longest side (src or tgt)
    accum_steps: int = 1  # batches per optimiser update
    tokens_per_update: int = (
        0  # >0: derive accum_steps per process from processes × max_tokens (excludes accum_steps > 1)
    )
    max_epochs: int = 20  # stop after this many passes over the training data
    max_steps: int = 0  # stop after this many updates (0 = no limit)
    lr_factor: float = 1.0  # multiplies the paper's d_model^-0.5 · min(s^-0.5, s·w^-1.5)
    warmup_steps: int = 4000  # updates of linear warm-up before the inverse-square-root decay
    adam_beta1: float = 0.9  # Adam's β1 (paper: 0.9)
    adam_beta2: float = 0.98  # Adam's β2 (paper: 0.98)
    adam_eps: float = 1e-9  # Adam's ε (paper: 1e-9)
    weight_decay: float = 0.0  # Adam's L2 weight decay (paper: 0)
    label_smoothing: float = 0.1  # ε_ls of the label-smoothed loss (paper: 0.1)
    clip_norm: float = 0.0  # gradient clipping by global norm (0 = off)
    max_bad_updates: int = 5  # stop after this many updates in a row skipped (non-finite loss, out of memory)
    valid_every: int = 0  # validate every N updates (0 = at the end of each epoch)
    valid_bleu: bool = True  # also decode the validation set and score BLEU
    valid_beam: int = 1  # beam size for validation BLEU (1 = greedy, fastest)
    valid_max_sentences: int = 0  # decode only the first N validation sentences (0 = all)
    early_stop_metric: str = field(default="bleu", metadata=_choices("bleu", "loss"))  # picks best.pt; drives patience
    patience: int = 0  # stop after this many validations without improvement (0 = never)
    checkpoint_every: int = 0  # also save last.pt every N updates (0 = only at validation)
    checkpoint_every_minutes: float = 0.0  # also save last.pt every N minutes of training (0 = off)
    gpu_checkpoint_minutes: float = 5.0  # on a GPU, checkpoint_every saves at most once per N minutes (0 = no limit)
    keep_checkpoints: int = 0  # keep the weights of the last N checkpoints in snapshots/ (for `average --last`)
    log_every: int = 50  # print a progress line every N updates
    tensorboard: bool = (
        False  # also write metrics as TensorBoard scalars to RUN_DIR/tensorboard (mhatrain[tensorboard])
    )
    compile: bool = False  # torch.compile the model (falls back to eager if it fails)
    dist_backend: str = field(
        default="auto", metadata=_choices("auto", "nccl", "gloo")
    )  # torchrun: nccl on GPU, gloo on CPU


@dataclass
class DecodeConfig:
    beam: int = 4  # beam size (1 = greedy)
    alpha: float = 0.6  # length penalty ((5 + len) / 6) ** alpha, as in the paper
    max_len_a: float = 1.5  # output length limit: a · source_length + b
    max_len_b: int = 10  # the b of max_len_a
    batch_tokens: int = 6000  # source-token budget per decoding batch


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def accum_steps_for(t: TrainConfig, world: int) -> int:
    """Batches each process accumulates per update with `world` processes: train.accum_steps, or the
    number that brings world × accum × max_tokens nearest to train.tokens_per_update (at least 1)."""
    if not t.tokens_per_update:
        return t.accum_steps
    return max(1, round(t.tokens_per_update / (world * t.max_tokens)))


SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}


# ----------------------------------------------------------------------------- loading


def load_config(
    path: str | Path | None, overrides: list[str] | tuple[str, ...] = (), check_paths: bool = True
) -> Config:
    """Read a YAML file (or defaults when `path` is None), apply `--set` overrides, check the result.

    check_paths=False skips checks of data paths (a finished run can translate without its data).
    """
    source = str(path) if path is not None else "<defaults>"
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file not found: {path}")
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory, not a YAML file")
        if not path.is_file():
            raise ConfigError(f"config file {path} is not a regular file")
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
            if context and start and mark and start.line != mark.line:  # e.g. where an unclosed [ began
                problem += f" ({context} started at line {start.line + 1})"
            raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not a UTF-8 text file") from None
        if raw is None:
            raise ConfigError(f"{path}: config file is empty (expected sections such as model:, data:, train:)")
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(raw).__name__}")
    config = _build(raw, source)
    for item in overrides:
        apply_override(config, item)
    check_config(config, source, check_paths, overrides)
    if check_paths:
        config.data.local_dir = absolute_local_dir(config.data.local_dir)
    return config


def absolute_local_dir(local_dir: str | None) -> str | None:
    """data.local_dir as a config records it: absolute (a relative one taken from the working directory),
    so a run directory's config works from any working directory."""
    return None if local_dir is None else str(Path(local_dir).expanduser().resolve())


def config_from_dict(raw: dict, source: str = "<dict>", check_paths: bool = True) -> Config:
    config = _build(raw, source)
    check_config(config, source, check_paths)
    return config


def _build(raw: dict, source: str) -> Config:
    sections = {}
    for name, value in raw.items():
        if name not in SECTIONS:
            raise ConfigError(f"{source}: unknown section '{name}'{_did_you_mean(name, SECTIONS)}")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: section '{name}' must be a mapping, got {type(value).__name__}")
        sections[name] = _build_section(_section_class(name), value, name, source)
    return Config(**sections)


def _build_section(cls: type, value: dict, name: str, source: str):
    """A config dataclass (a section, or a mapping inside one such as model.head_gates) from a mapping
    whose keys are all its fields' names: the values type-checked, the keys left out at their defaults."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, item in value.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown key '{name}.{key}'{_did_you_mean(str(key), known)}")
        kwargs[key] = _coerce(item, known[key], f"{name}.{key}", source)
    return cls(**kwargs)


def apply_override(config: Config, item: str) -> None:
    """Apply one `section.key=value` override; the value is parsed as YAML, then type-checked."""
    source = f"--set {item}"
    if "=" not in item:
        raise ConfigError(f"{source}: expected section.key=value")
    dotted, text = item.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) not in (2, 3):
        raise ConfigError(f"{source}: expected section.key=value, e.g. train.max_tokens=2048")
    name = parts[0]
    if name not in SECTIONS:
        raise ConfigError(f"{source}: unknown section '{name}'{_did_you_mean(name, SECTIONS)}")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    owner, key = getattr(config, name), parts[1]
    if len(parts) == 3:  # a key of a mapping inside the section: model.head_gates.l0=0.01
        owner, key = _nested(owner, name, key, source), parts[2]
    known = {f.name: f for f in dataclasses.fields(owner)}
    if key not in known:
        where = ".".join(parts[:-1])
        raise ConfigError(f"{source}: unknown key '{where}.{key}'{_did_you_mean(key, known)}")
    setattr(owner, key, _coerce(value, known[key], dotted.strip(), source))


def _nested(section, name: str, key: str, source: str):
    """The mapping at section.key that a three-part --set writes into, made with its defaults if unset."""
    known = {f.name: f for f in dataclasses.fields(section)}
    if key not in known:
        raise ConfigError(f"{source}: unknown key '{name}.{key}'{_did_you_mean(key, known)}")
    cls = _mapping_class(known[key])
    if cls is None:
        raise ConfigError(f"{source}: '{name}.{key}' is not a mapping: expected {name}.{key}=value")
    if getattr(section, key) is None:
        setattr(section, key, cls())
    return getattr(section, key)


def _mapping_class(f: dataclasses.Field) -> type | None:
    """The config dataclass a field holds (model.head_gates: HeadGatesConfig), or None for a plain value."""
    base = _base_type(typing.get_type_hints(_owner_of(f))[f.name])
    return base if dataclasses.is_dataclass(base) else None


def _section_class(name: str) -> type:
    return {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig}[name]


def _did_you_mean(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{hint}; valid: {', '.join(sorted(options))}"


FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)


def _base_type(hint):
    """The type of a hint without its `| None`."""
    return next((a for a in typing.get_args(hint) if a is not type(None)), hint) if _optional(hint) else hint


def _optional(hint) -> bool:
    return type(None) in typing.get_args(hint)


def _coerce(value, f: dataclasses.Field, key: str, source: str):
    """Check `value` against the field's annotated type; ints are accepted where floats are. A field that
    holds a config dataclass takes a mapping of its keys; a list field, a list of its element type."""
    hint = typing.get_type_hints(_owner_of(f))[f.name]
    base = _base_type(hint)
    if value is None:
        if _optional(hint):
            return None
        raise ConfigError(f"{source}: '{key}' must be {_type_name(base)}, got null")
    if dataclasses.is_dataclass(base):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{key}' must be a mapping of {_keys(base)}, got {type(value).__name__}")
        return _build_section(base, value, key, source)
    if typing.get_origin(base) is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: '{key}' must be a list of {_type_name(base)}, got {type(value).__name__}")
        (element,) = typing.get_args(base)
        return [_coerce_value(v, element, f, f"{key}[{i}]", source) for i, v in enumerate(value)]
    return _coerce_value(value, base, f, key, source)


def _type_name(base) -> str:
    return typing.get_args(base)[0].__name__ if typing.get_origin(base) is list else base.__name__


def _keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


def _coerce_value(value, base: type, f: dataclasses.Field, key: str, source: str):
    """One value (a key's, or an element of a list key's) checked against `base` and the field's choices."""
    if value is None:
        raise ConfigError(f"{source}: '{key}' must be {base.__name__}, got null")
    if base is float and isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e-9 (no dot) as a string
    ok = (
        (base is bool and isinstance(value, bool))
        or (base is int and isinstance(value, int) and not isinstance(value, bool))
        or (base is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (base is str and isinstance(value, str))
    )
    if not ok:
        raise ConfigError(f"{source}: '{key}' must be {base.__name__}, got {type(value).__name__} {value!r}")
    if base is float:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{source}: '{key}' must be a finite number, got {value}")
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{source}: '{key}' must be one of {', '.join(choices)}, got {value!r}")
    return value


def _owner_of(f: dataclasses.Field) -> type:
    for cls in (ModelConfig, DataConfig, TrainConfig, DecodeConfig, HeadGatesConfig, HeadsPerLayer):
        if any(g is f for g in dataclasses.fields(cls)):
            return cls
    raise KeyError(f.name)


# ----------------------------------------------------------------------------- checks


def heads_divide(d_model: int, n_heads: int) -> bool:
    """Whether n_heads (> 0) heads of d_k = d_v = d_model / n_heads dimensions fill d_model exactly, as
    the paper's heads do: the rule behind model.n_heads, `ablate --heads` and `bench --heads`."""
    return d_model % n_heads == 0


_Fail = Callable[..., NoReturn]  # fail(key, message, *related keys): raises the ConfigError for a broken rule


def check_config(config: Config, source: str, check_paths: bool = True, overrides=()) -> None:
    """Every rule a config must satisfy; the first one it breaks is a ConfigError naming the key and where
    its value came from: the `--set` among `overrides` that gave it, else `source`."""

    def fail(key: str, message: str, *related: str) -> NoReturn:
        raise ConfigError(f"{_blame(source, overrides, key, related)}: '{key}' {message}")

    _check_model(config.model, fail)
    _check_data(config.data, fail, check_paths)
    _check_positions(config.model, config.data, fail)
    _check_train(config.train, fail)
    _check_decode(config.decode, fail)


def _check_model(m: ModelConfig, fail: _Fail) -> None:
    _positive(fail, "model", m, ("d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers", "max_positions"))
    if m.d_head is not None and m.d_head <= 0:
        fail("model.d_head", f"must be positive (or null for d_model / n_heads), got {m.d_head}")
    if m.d_head is None and not heads_divide(m.d_model, m.n_heads):
        fail("model.n_heads", f"must divide model.d_model={m.d_model}, got {m.n_heads} (or set model.d_head)")
    _below_one(fail, "model", m, ("dropout", "attention_dropout"))
    if m.head_gates is not None:
        _check_head_gates(m.head_gates, fail)
    if m.heads_per_layer is not None:
        _check_heads_per_layer(m, m.heads_per_layer, fail)


def _check_head_gates(g: HeadGatesConfig, fail: _Fail) -> None:
    """The hard-concrete distribution needs γ < 0 and ζ > 1: only then can a gate be exactly 0 or 1."""
    if g.l0 < 0:
        fail("model.head_gates.l0", f"must not be negative, got {g.l0}")
    if g.temperature <= 0:
        fail("model.head_gates.temperature", f"must be positive, got {g.temperature}")
    if len(g.stretch) != 2 or not (g.stretch[0] < 0 and g.stretch[1] > 1):
        fail("model.head_gates.stretch", f"must be [γ, ζ] with γ < 0 and ζ > 1 (e.g. [-0.1, 1.1]), got {g.stretch}")
    if not (g.lr_scale > 0 and math.isfinite(g.lr_scale)):
        fail("model.head_gates.lr_scale", f"must be a positive number, got {g.lr_scale}")
    if not g.kinds or len(set(g.kinds)) != len(g.kinds):
        fail("model.head_gates.kinds", f"must name each gated kind once, at least one of {', '.join(ATTENTION_KINDS)}")


def _check_heads_per_layer(m: ModelConfig, layout: HeadsPerLayer, fail: _Fail) -> None:
    """One count per layer of the kind's stack (or none: n_heads in every layer), none negative."""
    for kind in ATTENTION_KINDS:
        counts, layers = getattr(layout, kind), m.n_encoder_layers if kind == "enc_self" else m.n_decoder_layers
        key = f"model.heads_per_layer.{kind}"
        if counts and len(counts) != layers:
            stack = "model.n_encoder_layers" if kind == "enc_self" else "model.n_decoder_layers"
            fail(key, f"must have one count per layer ({stack}={layers}), got {len(counts)}: {counts}", stack)
        if any(c < 0 for c in counts):
            fail(key, f"must not hold a negative head count, got {counts}")


def _check_data(d: DataConfig, fail: _Fail, check_paths: bool) -> None:
    _positive(fail, "data", d, ("max_length", "vocab_size"))
    _non_negative(fail, "data", d, ("max_train_examples", "tokenizer_sample"))
    if not 0.0 < d.character_coverage <= 1.0:
        fail("data.character_coverage", f"must be in (0, 1], got {d.character_coverage}")
    if d.vocab_size < 16:
        fail("data.vocab_size", f"must be at least 16, got {d.vocab_size}")
    if d.src_lang == d.tgt_lang:
        fail("data.tgt_lang", f"must differ from data.src_lang ('{d.src_lang}')")
    if check_paths and d.local_dir is not None and not Path(d.local_dir).expanduser().is_dir():
        fail("data.local_dir", f"is not a directory: {d.local_dir}")


def _check_positions(m: ModelConfig, d: DataConfig, fail: _Fail) -> None:
    """The position table holds BOS, the longest kept sentence and EOS."""
    if d.max_length + 2 > m.max_positions:
        fail(
            "model.max_positions",
            f"must exceed data.max_length + 1 = {d.max_length + 1}, got {m.max_positions}",
            "data.max_length",
        )


def _check_train(t: TrainConfig, fail: _Fail) -> None:
    _positive(
        fail,
        "train",
        t,
        ("max_tokens", "accum_steps", "max_epochs", "warmup_steps", "valid_beam", "log_every", "max_bad_updates"),
    )
    _non_negative(
        fail,
        "train",
        t,
        (
            "max_steps",
            "valid_every",
            "patience",
            "checkpoint_every",
            "threads",
            "checkpoint_every_minutes",
            "gpu_checkpoint_minutes",
            "keep_checkpoints",
            "tokens_per_update",
            "clip_norm",
            "weight_decay",
            "valid_max_sentences",
        ),
    )
    _below_one(fail, "train", t, ("label_smoothing", "adam_beta1", "adam_beta2"))
    if t.tokens_per_update and t.accum_steps > 1:
        fail(
            "train.tokens_per_update",
            f"and train.accum_steps={t.accum_steps} both set the batches per update: "
            f"set train.accum_steps to 1, or train.tokens_per_update to 0",
        )
    if t.tokens_per_update and t.tokens_per_update < t.max_tokens:
        fail("train.tokens_per_update", f"must be at least train.max_tokens={t.max_tokens}, got {t.tokens_per_update}")
    if t.lr_factor <= 0 or t.adam_eps <= 0:
        fail("train.lr_factor" if t.lr_factor <= 0 else "train.adam_eps", "must be positive")
    # the one rule for device names; imported here because runtime imports torch, and this module imports
    # without it (data.sources, inference.scoring and scripts/make_docs.py import it)
    from .runtime import is_device_name

    if not is_device_name(t.device, allow_auto=True):
        fail("train.device", f"must be auto, cpu, cuda or cuda:N, got {t.device!r}")


def _check_decode(dec: DecodeConfig, fail: _Fail) -> None:
    _positive(fail, "decode", dec, ("beam", "batch_tokens"))
    _non_negative(fail, "decode", dec, ("alpha", "max_len_a", "max_len_b"))


def _positive(fail: _Fail, name: str, section, keys: tuple[str, ...]) -> None:
    """Each of `keys` of the config section `name` is above 0."""
    for key in keys:
        if (value := getattr(section, key)) <= 0:
            fail(f"{name}.{key}", f"must be positive, got {value}")


def _non_negative(fail: _Fail, name: str, section, keys: tuple[str, ...]) -> None:
    """Each of `keys` of the config section `name` is 0 or above."""
    for key in keys:
        if (value := getattr(section, key)) < 0:
            fail(f"{name}.{key}", f"must not be negative, got {value}")


def _below_one(fail: _Fail, name: str, section, keys: tuple[str, ...]) -> None:
    """Each of `keys` of the config section `name` is in [0, 1): a dropout rate, a smoothing, a β."""
    for key in keys:
        if not 0.0 <= (value := getattr(section, key)) < 1.0:
            fail(f"{name}.{key}", f"must be in [0, 1), got {value}")


def _blame(source: str, overrides, key: str, related: tuple[str, ...]) -> str:
    """Where a broken rule's values came from: the last `--set` of `key`; else `source`, with the last
    `--set` of each related key the rule also reads."""
    last = {item.split("=", 1)[0].strip(): item for item in overrides if "=" in item}
    if key in last:
        return f"--set {last[key]}"
    sets = [last[k] for k in related if k in last]
    return f"{source} with --set {' --set '.join(sets)}" if sets else source


# ----------------------------------------------------------------------------- saving


def dump_config(config: Config, path: Path) -> None:
    """Write the resolved config as YAML (round-trips through load_config)."""
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
