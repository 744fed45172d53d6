"""A study's grid: its points (a head count and a seed, in a cell of varied settings; or a fixed layout
of heads per layer and a seed: a layout point), their names, the cells of `ablate --vary`, and the checks
of `--heads`, `--seeds` and `--vary`. Nothing here reads or writes the disk: directory.py lays the grid out
in a study directory, fixed_layouts.py reads `--layout` files.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field

from ...core.config import Config, apply_override, heads_divide
from ...core.errors import ConfigError, MhatrainError

POINT_NAME = re.compile(r"^h(\d+)-seed(\d+)$")
LAYOUT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # a --layout's NAME: it names folders (layout-NAME-seed1)
LAYOUT_POINT_NAME = re.compile(r"^layout-([A-Za-z0-9_.-]+)-seed(\d+)$")


CELL_PART = re.compile(r"^([a-z]+\.[a-z_0-9]+)=([^,/=\s]+)$")  # one varied setting of a cell's name


GRID_KEYS = {"model.n_heads", "train.seed"}  # set per grid point, so the base config's values do not matter


# Keys that change how a run executes, not what it computes: a study may be continued with other values.
EXECUTION_KEYS = {
    "train.threads",
    "train.device",
    "train.log_every",
    "train.compile",
    "decode.batch_tokens",
    "data.cache_dir",
    "train.dist_backend",
    "train.tensorboard",
}


Cell = tuple[tuple[str, str], ...]  # the varied settings of a cell: (dotted key, value as given) pairs


@dataclass(frozen=True)
class Layout:
    """A fixed layout of heads (`ablate --layout NAME=FILE`): model.heads_per_layer as inline YAML, each
    head of the base config's head size. Within a study a name means one layout (directory.py checks it on
    a rerun), so layouts compare by name: a point read back from its folder name equals the planned one."""

    name: str
    setting: str = field(default="", compare=False)  # {enc_self: [...], dec_self: [...], cross: [...]}

    @property
    def override(self) -> str:
        if not self.setting:  # a point read back from its folder's name: it knows its layout's name only
            raise ValueError(f"layout {self.name}: its heads per layer are in study.yaml, not in the point's name")
        return f"model.heads_per_layer={self.setting}"


@dataclass(frozen=True)
class Point:
    """One grid point: a head count and a seed, in a cell of varied settings (none without --vary); or a
    layout point: a fixed layout's heads per layer and a seed, on the base config's model.n_heads (which
    sets the head size). A layout point is its own arm, never one of the h it shares n_heads with."""

    heads: int  # h; 0 for a layout point (its layout sets each layer's heads)
    seed: int
    cell: Cell = ()
    layout: Layout | None = None

    @classmethod
    def of_layout(cls, layout: Layout, seed: int, cell: Cell = ()) -> Point:
        return cls(0, seed, cell, layout)

    @property
    def name(self) -> str:
        """h08-seed1 (layout-NAME-seed1), or CELL/h08-seed1 in a cell: the run directory's path in the study
        directory."""
        own = f"layout-{self.layout.name}-seed{self.seed}" if self.layout else f"h{self.heads:02d}-seed{self.seed}"
        return f"{cell_name(self.cell)}/{own}" if self.cell else own

    @property
    def label(self) -> str:
        """h=8, or layout gates: the arm the point belongs to, as progress lines and plans name it."""
        return f"layout {self.layout.name}" if self.layout else f"h={self.heads}"

    @property
    def overrides(self) -> list[str]:
        own = [self.layout.override] if self.layout else [f"model.n_heads={self.heads}"]
        return [*(f"{key}={value}" for key, value in self.cell), *own, f"train.seed={self.seed}"]


@dataclass(frozen=True)
class Slot:
    """Where a grid point runs: one of `ablate --jobs N`'s N slots, or a cluster job. None keeps the
    config's own value."""

    device: str | None = None  # train.device, e.g. cuda:1 (from --devices)
    threads: int | None = None  # train.threads: this slot's share of the CPU cores

    @property
    def overrides(self) -> list[str]:
        """The slot as `--set` values: the one place its values become text, for a point's commands."""
        return [
            *([f"train.device={self.device}"] if self.device else []),
            *([f"train.threads={self.threads}"] if self.threads else []),
        ]


def point_overrides(point: Point, slot: Slot = Slot()) -> list[str]:
    """The `--set` values of a point's training command on `slot`: its cell's, its h and seed, the slot's."""
    return [*point.overrides, *slot.overrides]


def cell_name(cell: Cell) -> str:
    """model.norm=pre,model.d_model=256: the cell's folder name (values hold no ',', '/', '=' or spaces)."""
    return ",".join(f"{key}={value}" for key, value in cell)


def parse_cell(name: str) -> Cell | None:
    parts = [CELL_PART.match(part) for part in name.split(",")]
    return tuple((m.group(1), m.group(2)) for m in parts) if all(parts) else None


def parse_point_name(name: str) -> Point | None:
    cell: Cell = ()
    if "/" in name:
        folder, name = name.rsplit("/", 1)
        if (cell := parse_cell(folder)) is None:
            return None
    if match := POINT_NAME.match(name):
        return Point(int(match.group(1)), int(match.group(2)), cell)
    if match := LAYOUT_POINT_NAME.match(name):
        return Point.of_layout(Layout(match.group(1)), int(match.group(2)), cell)
    return None


def check_heads(heads: list[int], d_model: int, d_head: int | None = None, where: str = "") -> list[int]:
    """The head counts of a grid, sorted: positive, distinct, and each dividing d_model (so that
    d_k = d_model / h is whole) unless model.d_head sets the head size. where: the cell, for the message."""
    _check_distinct(heads, "--heads")
    for h in heads:
        if h <= 0:
            raise MhatrainError(f"--heads: {h} is not a positive number of heads")
        if d_head is None and not heads_divide(d_model, h):
            divisors = [d for d in range(1, d_model + 1) if heads_divide(d_model, d)]
            shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            raise MhatrainError(
                f"--heads: {h} does not divide model.d_model={d_model}{where} (d_k = d_model / h must be "
                f"a whole number, or set model.d_head; divisors: {shown})"
            )
    return sorted(heads)


def check_seeds(seeds: list[int]) -> list[int]:
    """The seeds of a grid, in the order given: distinct integers ≥ 0."""
    _check_distinct(seeds, "--seeds")
    for seed in seeds:
        if seed < 0:
            raise MhatrainError(f"--seeds: {seed} is negative (seeds are integers ≥ 0)")
    return list(seeds)


def _check_distinct(values: list[int], option: str) -> None:
    if not values:
        raise MhatrainError(f"{option}: the grid needs at least one value")
    for i, value in enumerate(values):
        if value in values[:i]:
            raise MhatrainError(f"{option}: {value} is given twice")


def expand_grid(
    heads: list[int], seeds: list[int], factors: dict[str, list[str]] | None = None, layouts: list[Layout] = ()
) -> list[Point]:
    """Seed-major order: the whole head curve for the first seed comes first (in every cell), then the
    layouts of that seed, so a partial study already shows it. factors: the --vary settings, key → values;
    their combinations are the cells."""
    return [
        point
        for seed in seeds
        for cell in grid_cells(factors or {})
        for point in [
            *(Point(h, seed, cell) for h in sorted(heads)),
            *(Point.of_layout(layout, seed, cell) for layout in layouts),
        ]
    ]


def check_layout_name(name: str, item: str) -> str:
    """A --layout's NAME: letters, digits, '-', '_' and '.' (it names the layout's folders)."""
    if not LAYOUT_NAME.match(name) or name in (".", ".."):
        raise MhatrainError(
            f"--layout {item}: {name!r} is not a layout name (letters, digits, '-', '_' and '.' only: it names folders)"
        )
    return name


def grid_cells(factors: dict[str, list[str]]) -> list[Cell]:
    """Every combination of the factors' values, in the order given (one empty cell without factors).
    A linked factor ("model.d_model,model.d_ff" → "512:2048", ...) sets its keys together, one part each."""
    keys = list(factors)
    return [
        tuple(part for key, value in zip(keys, values) for part in factor_parts(key, value))
        for values in itertools.product(*(factors[key] for key in keys))
    ]


def factor_parts(key: str, value: str) -> list[tuple[str, str]]:
    """The (key, value) settings of one level of a factor: one for a single key, one per key when linked."""
    keys = key.split(",")
    return list(zip(keys, value.split(":"))) if len(keys) > 1 else [(key, value)]


def check_factors(items: list[str], config: Config) -> dict[str, list[str]]:
    """`--vary KEY=V1,V2` options → key → values (as given): each key a config key other than those the
    grid sets itself or that only change how a run executes, given once; each value valid for it,
    distinct, and usable in a folder name. Keys that must change together are one linked factor,
    `--vary K1,K2=A1:A2,B1:B2` (e.g. model.d_model,model.d_ff=256:1024,512:2048): its levels set every
    key at once, and it is kept as "K1,K2" → ["A1:A2", "B1:B2"]. A broken option is one MhatrainError line."""
    factors: dict[str, list[str]] = {}
    varied: set[str] = set()
    for item in items:
        text, sep, levels_text = item.partition("=")
        keys = [key.strip() for key in text.split(",")]
        if not sep or not levels_text.strip() or any(key.count(".") != 1 for key in keys):
            raise MhatrainError(
                f"--vary {item}: expected KEY=V1,V2,... with KEY a config key, e.g. --vary model.norm=pre,post "
                f"(keys that change together: K1,K2=A1:A2,B1:B2)"
            )
        for key in keys:
            _check_factor_key(item, key, varied)
            varied.add(key)
        levels = [level.strip() for level in levels_text.split(",")]
        for level in levels:
            if levels.count(level) > 1:
                raise MhatrainError(f"--vary {item}: {level} is given twice")
            values = level.split(":") if len(keys) > 1 else [level]
            if len(values) != len(keys):
                raise MhatrainError(
                    f"--vary {item}: {level!r} has {len(values)} value(s) for {len(keys)} keys: give one per key, "
                    f"joined by ':'"
                )
            for key, value in zip(keys, values):
                _check_factor_value(item, config, key, value)
        factors[",".join(keys)] = levels
    return factors


def _check_factor_key(item: str, key: str, varied: set[str]) -> None:
    if key in GRID_KEYS:
        option = "--heads" if key == "model.n_heads" else "--seeds"
        raise MhatrainError(f"--vary {item}: {key} is set per grid point by {option}; vary another key")
    if key in EXECUTION_KEYS:
        raise MhatrainError(f"--vary {item}: {key} changes how a run executes, not what it computes")
    if key in varied:
        raise MhatrainError(f"--vary {item}: {key} is varied twice; give all its values in one --vary")


def _check_factor_value(item: str, config: Config, key: str, value: str) -> None:
    if not value or any(c in value for c in "/=,:") or any(c.isspace() for c in value):
        raise MhatrainError(
            f"--vary {item}: {value!r} is not a value (no '/', '=', ',', ':' or spaces: it names a folder)"
        )
    try:
        apply_override(copy.deepcopy(config), f"{key}={value}")
    except ConfigError as exc:
        raise MhatrainError(str(exc).replace(f"--set {key}={value}", f"--vary {item}", 1)) from None


def cell_labels(cells: list[dict[str, str]]) -> list[str]:
    """Short names of cells for the figure and the terminal: the keys whose values differ between the
    cells (every key when they all agree), without their section: "d_model=512, d_ff=2048"."""
    keys = list(dict.fromkeys(key for cell in cells for key in cell))
    differing = [key for key in keys if len({cell.get(key) for cell in cells}) > 1] or keys
    return [", ".join(f"{key.split('.', 1)[-1]}={cell[key]}" for key in differing if key in cell) for cell in cells]
