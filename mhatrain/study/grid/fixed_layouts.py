"""`ablate --layout NAME=FILE`: a fixed layout of heads per layer as a control arm of the head-count study.

`mhatrain prune` finds, per L0 penalty, which heads a trained model keeps (its layout.yaml: the config key
model.heads_per_layer). Whether that layout is good in itself, or only good as what is left of a model
that had all its heads, takes a model trained from scratch with it: a layout point. This module reads the
layout files and checks each layout against the study's config, as the config's own checks would when
the point's command loads it; points.py names the points, directory.py records the layouts in study.yaml.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import yaml

from ...core.config import ATTENTION_KINDS, Config, ModelConfig, apply_override, check_config
from ...core.errors import ConfigError, MhatrainError
from ...model.sizes import heads_in
from .points import Layout, check_layout_name

LAYOUT_KEY = "model.heads_per_layer"


def read_layouts(items: list[str], config: Config) -> list[Layout]:
    """`--layout NAME=FILE` options → their layouts, in the order given: each NAME folder-safe and given
    once, each FILE a YAML file holding model.heads_per_layer (as prune's layout.yaml does), a top-level
    heads_per_layer, or the bare mapping, that fits `config`. A broken option is one MhatrainError line."""
    layouts: list[Layout] = []
    for item in items:
        name, sep, file = item.partition("=")  # FILE may hold '=' (l0=0.03/layout.yaml), NAME may not
        if not sep or not name.strip() or not file.strip():
            raise MhatrainError(f"--layout {item}: expected NAME=FILE, e.g. --layout gates=l0=0.03/layout.yaml")
        check_layout_name(name, item)
        if any(layout.name == name for layout in layouts):
            raise MhatrainError(f"--layout {item}: the name {name} is given twice")
        layouts.append(checked_layout(name, _read_mapping(Path(file), item), config, f"--layout {item}"))
    return layouts


def checked_layout(name: str, mapping, config: Config, where: str) -> Layout:
    """The layout of `mapping` (heads_per_layer's keys), checked as `config` with it set; its setting is
    the whole mapping, every kind written out, so one layout has one text whatever file it came from."""
    if not isinstance(mapping, dict):
        raise MhatrainError(f"{where}: {LAYOUT_KEY} must be a mapping of {', '.join(ATTENTION_KINDS)}")
    text = _inline(mapping)
    result = copy.deepcopy(config)
    try:
        apply_override(result, f"{LAYOUT_KEY}={text}")
        check_config(result, where, check_paths=False)
    except ConfigError as exc:
        raise MhatrainError(str(exc).replace(f"--set {LAYOUT_KEY}={text}", where, 1)) from None
    return recorded_layout(name, dataclasses.asdict(result.model.heads_per_layer))


def recorded_layout(name: str, mapping: dict[str, list[int]]) -> Layout:
    """The layout of a checked mapping (as study.yaml records it), as inline YAML: one text per layout."""
    return Layout(name, _inline(mapping))


def layout_mapping(layout: Layout) -> dict[str, list[int]]:
    """The layout's model.heads_per_layer as a mapping (what study.yaml records)."""
    return yaml.safe_load(layout.setting)


def _inline(mapping) -> str:
    """The layout as one line of flow YAML, never wrapped (a 6-layer layout is longer than YAML's 80 columns)."""
    return yaml.safe_dump(mapping, default_flow_style=True, sort_keys=False, width=float("inf")).strip()


def total_heads(model: ModelConfig) -> int:
    """The heads of every attention module of the model, summed (a layout's size, against h × modules)."""
    layers = {"enc_self": model.n_encoder_layers, "dec_self": model.n_decoder_layers, "cross": model.n_decoder_layers}
    return sum(heads_in(model, kind, layer) for kind, n in layers.items() for layer in range(n))


def _read_mapping(path: Path, item: str):
    """The heads_per_layer mapping a layout file holds."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MhatrainError(f"--layout {item}: file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MhatrainError(f"--layout {item}: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MhatrainError(f"--layout {item}: {path} is not valid YAML ({problem})") from None
    if isinstance(data, dict) and isinstance(data.get("model"), dict) and "heads_per_layer" in data["model"]:
        return data["model"]["heads_per_layer"]
    if isinstance(data, dict) and "heads_per_layer" in data:
        return data["heads_per_layer"]
    if isinstance(data, dict) and data and set(data) <= set(ATTENTION_KINDS):
        return data
    raise MhatrainError(
        f"--layout {item}: {path} holds no {LAYOUT_KEY} (expected model: {{heads_per_layer: {{...}}}}, as the "
        f"layout.yaml of `mhatrain prune`, or a mapping of {', '.join(ATTENTION_KINDS)})"
    )
