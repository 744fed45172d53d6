"""The head-count study on disk: its grid points, its record, its lock, and where each point stands.

The one module that names a study directory's files; `ablate` runs points, `report`, `curves`,
`export` and `cluster` read studies, all through it. A study directory:
    study.yaml            the grid (heads, seeds, each --layout's heads per layer and the model.n_heads
                          that sets their size), the source config and its --set overrides
    base-config.yaml      the resolved config every grid point starts from
    provenance.json       one session per `mhatrain ablate`: command, code, software, machine (core/provenance.py)
    h08-seed1/ ...        one run directory per grid point (core/rundir.py names its files), laid out with
                          its config.yaml when the study is recorded; `mhatrain train` fills it, then
                          `mhatrain eval` adds eval/valid.beamK.json and eval/test.beamK.json
    layout-NAME-seed1/    the same for a layout point of `ablate --layout NAME=FILE`
    model.norm=pre/h08-seed1/ ...
                          with `ablate --vary KEY=V1,V2`: one folder per cell (a combination of the varied
                          settings, named KEY=V[,KEY=V...]) holding that cell's grid points, laid out as a
                          study of its own (its report files go there too); study.yaml lists the factors
    logs/h08-seed1.log    output of a point run in a subprocess (--jobs N); logs/CELL/h08-seed1.log in a cell
    jobs/                 with --executor slurm|local: submitit's files per job, jobs.json (cluster.py)
    report.md .csv .json .png, report-runs.csv   written by `mhatrain report` (and at the end of `ablate`)

A grid point is three steps on base-config.yaml with `--set model.n_heads=H --set train.seed=S` (after
its cell's `--set KEY=V`):
`train --resume` (a run directory without a checkpoint starts from the beginning, an interrupted
one continues, a finished one does nothing), `eval --split valid` and `eval --split test`
(point_commands), on a Slot: the device and CPU threads it runs with. A layout point (`ablate --layout`)
sets `--set model.heads_per_layer=LAYOUT` instead of model.n_heads. Its state, read from its run
directory, is one of STATES.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rich.console import Console

from ...core.checkpoint import config_differences, config_value
from ...core.config import Config, absolute_local_dir, apply_override, check_config, dump_config
from ...core.errors import MhatrainError
from ...core.files import atomic_write_text, portable_text
from ...core.provenance import PROVENANCE_FILE, code_version
from ...core.rundir import CONFIG_FILE, eval_path, has_started, read_eval, read_summary
from .fixed_layouts import layout_mapping, recorded_layout
from .points import (
    EXECUTION_KEYS,
    GRID_KEYS,
    Cell,
    Layout,
    Point,
    Slot,
    cell_name,
    check_heads,
    check_seeds,
    expand_grid,
    grid_cells,
    parse_cell,
    parse_point_name,
    point_overrides,
)

STUDY_FILE = "study.yaml"
BASE_CONFIG = "base-config.yaml"
LOGS_DIR = "logs"
LOCK_FILE = ".lock"
EVAL_SPLITS = ("valid", "test")
# Where a grid point stands, in order: nothing trained yet; training started (a checkpoint or a
# metrics record exists, the run may be running or interrupted); trained (train_summary.json) but an
# evaluation of EVAL_SPLITS is missing; trained and evaluated.
STATES = ("pending", "training", "evaluating", "done")


def point_dirs(study_dir: Path) -> list[tuple[Point, Path]]:
    """The grid points that have a run directory in `study_dir` (or in one of its cell folders), with it
    (in directory order)."""
    found = []
    for d in sorted(Path(study_dir).iterdir()):
        if not d.is_dir():
            continue
        if (point := parse_point_name(d.name)) is not None:
            found.append((point, d))
        elif (cell := parse_cell(d.name)) is not None:
            for sub in sorted(d.iterdir()):
                if sub.is_dir() and (point := parse_point_name(sub.name)) is not None:
                    found.append((Point(point.heads, point.seed, cell, point.layout), sub))
    return found


def read_yaml(path: Path) -> dict | None:
    """The mapping in a YAML file; None when it is missing, unreadable or not a mapping (as io.read_json)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def is_study(path: Path) -> bool:
    """A study directory: one with study.yaml, or with grid-point run directories alone (h08-seed1, ...)."""
    path = Path(path)
    return (path / STUDY_FILE).is_file() or (path.is_dir() and bool(point_dirs(path)))


def read_record(study_dir: Path) -> dict:
    """study.yaml (empty when there is none or it cannot be read: a study can be run directories alone)."""
    return read_yaml(Path(study_dir) / STUDY_FILE) or {}


def read_base_config(study_dir: Path) -> dict:
    """base-config.yaml as a dict (empty when there is none), its data.local_dir made absolute as a loaded
    config's is: `mhatrain export` writes it relative to the directory it ran in, and a study continued
    from exported files, in that directory, is the same study."""
    return _comparable(read_yaml(Path(study_dir) / BASE_CONFIG) or {})


def _comparable(config: dict) -> dict:
    data = config.get("data")
    if isinstance(data, dict) and isinstance(data.get("local_dir"), str):
        data["local_dir"] = absolute_local_dir(data["local_dir"])
    return config


def differing_settings(study_dir: Path, names: list[str]) -> dict[str, dict[str, list[str]]]:
    """The settings in which the named points' config.yaml files differ, other than GRID_KEYS and
    EXECUTION_KEYS (a study's points should differ in h and seed only): dotted key → {value → points}."""
    configs = {name: _comparable(read_yaml(Path(study_dir) / name / CONFIG_FILE) or {}) for name in names}
    configs = {name: config for name, config in configs.items() if config}
    if not configs:
        return {}
    first = next(iter(configs.values()))
    keys = {key for config in configs.values() for key in config_differences(first, config)}
    out = {}
    for key in sorted(keys - GRID_KEYS - EXECUTION_KEYS):
        for name, config in configs.items():
            out.setdefault(key, {}).setdefault(repr(config_value(config, key)), []).append(name)
    return out


def run_state(run_dir: Path, beam: int | None) -> str:
    """Where a grid point's run directory stands: one of STATES (beam: decode.beam, which names the
    evaluation files)."""
    if read_summary(run_dir) is None:
        return "training" if has_started(run_dir) else "pending"
    return "evaluating" if missing_evaluations(run_dir, beam) else "done"


def missing_evaluations(run_dir: Path, beam: int | None) -> list[str]:
    """The splits of EVAL_SPLITS whose evaluation report is missing (or unreadable)."""
    return [split for split in EVAL_SPLITS if read_eval(run_dir, split, beam) is None]


@dataclass
class Study:
    dir: Path
    points: list[Point]  # the grid of this invocation
    heads: list[int]  # the whole recorded grid (a study can grow)
    seeds: list[int]
    beam: int  # decode.beam: names the eval files
    factors: dict[str, list[str]] = field(default_factory=dict)  # --vary: key → values (none: one cell)

    @property
    def base_config(self) -> Path:
        return self.dir / BASE_CONFIG

    def run_dir(self, point: Point) -> Path:
        return self.dir / point.name

    def log_path(self, point: Point) -> Path:
        return self.dir / LOGS_DIR / f"{point.name}.log"  # CELL/h08-seed1.log: a folder per cell

    def eval_file(self, point: Point, split: str) -> Path:
        return eval_path(self.run_dir(point), split, self.beam)

    def state(self, point: Point) -> str:
        """One of STATES."""
        return run_state(self.run_dir(point), self.beam)


def plan_study(
    config: Config,
    source: str,
    heads: list[int],
    seeds: list[int],
    slots: list[Slot],
    factors: dict[str, list[str]] | None = None,
    layouts: list[Layout] = (),
) -> tuple[list[int], list[int], list[Point]]:
    """Check the grid and every point's config (on each slot) before anything is written.
    factors: --vary's key → values (check_factors); every combination is a cell with the whole grid.
    layouts: --layout's layouts (fixed_layouts.read_layouts); each adds a point per seed."""
    for cell in grid_cells(factors or {}):
        cell_config = copy.deepcopy(config)
        for key, value in cell:
            apply_override(cell_config, f"{key}={value}")
        m = cell_config.model
        check_heads(heads, m.d_model, m.d_head, f" in cell {cell_name(cell)}" if cell else "")
    heads = sorted(heads)
    seeds = check_seeds(seeds)
    points = expand_grid(heads, seeds, factors, layouts)
    for point in points:  # every point's config must load exactly as its command will load it
        for slot in slots:
            point_config(config, point, slot, source)
    return heads, seeds, points


def point_config(config: Config, point: Point, slot: Slot = Slot(), source: str = BASE_CONFIG) -> Config:
    """The base config with the point's (and a slot's) `--set` values applied and checked."""
    result = copy.deepcopy(config)
    items = point_overrides(point, slot)
    for item in items:
        apply_override(result, item)
    check_config(result, f"{source} with --set {' --set '.join(items)}")
    return result


def open_study(
    study_dir: Path,
    config: Config,
    config_path: Path,
    overrides: list[str],
    heads: list[int],
    seeds: list[int],
    points: list[Point],
    *,
    overwrite: bool,
    console: Console,
    allow_code_change: bool = False,
    factors: dict[str, list[str]] | None = None,
    layouts: list[Layout] = (),
) -> Study:
    """Create the study directory, or check that an existing one was made with the same config and the
    same factor keys (--vary), that each layout name still means the same layout and, once its points
    have started, by the same code (unless allow_code_change). A study can grow: the head counts, seeds,
    factor levels and layouts of this command join the recorded grid."""
    recorded = _recorded_study(study_dir, factors or {})
    factors = joined_factors(recorded.get("factors") or {} if recorded else {}, factors or {})
    if recorded is not None and _config_changed(study_dir, config, overwrite):
        _discard_study(study_dir, console)
        recorded = None
    layouts = joined_layouts(study_dir, (recorded or {}).get("layouts") or {}, list(layouts), config.model.n_heads)
    ran: list = []  # the code versions that trained or evaluated points
    if recorded is not None:
        heads = sorted(set(recorded.get("heads", [])) | set(heads))
        seeds = list(dict.fromkeys([*recorded.get("seeds", []), *seeds]))
        if _started_points(study_dir):
            ran = list(recorded.get("code") or [])
            _check_same_code(study_dir, ran, allow_code_change)
    code = _append_new(ran, code_version())
    record = _study_record(
        recorded, config_path, overrides, heads=heads, seeds=seeds, factors=factors, code=code, layouts=layouts
    )
    _write_if_changed(study_dir / STUDY_FILE, yaml.safe_dump(record, sort_keys=False))
    _write_if_changed(study_dir / BASE_CONFIG, yaml.safe_dump(config.to_dict(), sort_keys=False))
    study = Study(study_dir, points, heads, seeds, config.decode.beam, factors)
    _lay_out_points(study, config)
    return study


def _recorded_study(study_dir: Path, factors: dict[str, list[str]]) -> dict | None:
    """study.yaml of the study in `study_dir`, None for a new study; an error if the directory holds
    something else, or a study with other factors."""
    study_file = study_dir / STUDY_FILE
    recorded = read_yaml(study_file)
    if recorded is None and study_file.exists():
        raise MhatrainError(f"{study_file}: cannot read it as a study record (a YAML mapping)")
    if recorded is None and study_dir.is_dir() and any(p.name != LOCK_FILE for p in study_dir.iterdir()):
        raise MhatrainError(
            f"{study_dir} is not empty and holds no study ({STUDY_FILE} is missing): choose another --out"
        )
    if recorded is not None and list(recorded.get("factors") or {}) != list(factors):
        raise MhatrainError(
            f"{study_dir} holds a study {_factors_text(recorded.get('factors') or {})}, and this command asks for "
            f"one {_factors_text(factors)}: vary the same keys (new values add cells), or use another --out"
        )
    return recorded


def joined_factors(recorded: dict[str, list[str]], given: dict[str, list[str]]) -> dict[str, list[str]]:
    """The factors of a study that gains levels: each key's recorded levels, then the new ones given."""
    return {key: list(dict.fromkeys([*recorded.get(key, []), *levels])) for key, levels in given.items()}


def joined_layouts(
    study_dir: Path, recorded: dict[str, dict], given: list[Layout], n_heads: int
) -> list[tuple[Layout, int]]:
    """The layouts of a study (each with the model.n_heads that sets its head size): the recorded ones,
    then the new ones given. A name recorded with another layout or head size is an error: its points
    would mix two models under one name."""
    joined = {
        name: (recorded_layout(name, entry["heads_per_layer"]), entry["n_heads"]) for name, entry in recorded.items()
    }
    for layout in given:
        before = joined.setdefault(layout.name, (layout, n_heads))
        if (layout_mapping(before[0]), before[1]) != (layout_mapping(layout), n_heads):
            raise MhatrainError(
                f"{study_dir} holds layout {layout.name} as {before[0].setting} (n_heads={before[1]}), and this "
                f"command gives it as {layout.setting} (n_heads={n_heads}): give the new layout another name, "
                f"or use another --out"
            )
    return list(joined.values())


def _config_changed(study_dir: Path, config: Config, overwrite: bool) -> bool:
    """Whether `config` computes something else than the study's base-config.yaml (grid and execution
    keys aside): an error, unless `overwrite` asks to start the study again."""
    base = read_base_config(study_dir)
    now = config.to_dict()
    differs = [k for k in config_differences(base, now) if k not in GRID_KEYS | EXECUTION_KEYS]
    if differs and not overwrite:
        shown = "; ".join(f"{k}: {config_value(base, k)!r} there, {config_value(now, k)!r} now" for k in differs[:4])
        more = f" (and {len(differs) - 4} more)" if len(differs) > 4 else ""
        raise MhatrainError(
            f"{study_dir} holds a study made with a different config ({shown}{more}); "
            f"use another --out, or --overwrite to delete its runs and start again"
        )
    return bool(differs)


def _study_record(
    recorded: dict | None,
    config_path: Path,
    overrides: list[str],
    *,
    heads: list[int],
    seeds: list[int],
    factors: dict[str, list[str]],
    code: list[dict],
    layouts: list[tuple[Layout, int]],
) -> dict:
    """What study.yaml holds (`recorded`: its previous content, which keeps its creation time)."""
    recorded_layouts = {
        layout.name: {"heads_per_layer": layout_mapping(layout), "n_heads": n_heads} for layout, n_heads in layouts
    }
    return {
        "heads": heads,
        "seeds": seeds,
        "config": portable_text(str(Path(config_path).resolve()), Path.cwd()),
        "overrides": list(overrides),
        "created": recorded.get("created") if recorded else datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **({"factors": factors} if factors else {}),
        **({"layouts": recorded_layouts} if layouts else {}),
        "note": "each grid point is base-config.yaml with "
        + ("--set KEY=V for each factor of its cell, then " if factors else "")
        + "--set model.n_heads=H --set train.seed=S"
        + (
            "; a layout point (layout-NAME-seed1), --set model.heads_per_layer=LAYOUT --set train.seed=S"
            if layouts
            else ""
        ),
        # Every code version that has run this study: one entry if a single commit ran every point.
        "code": code,
    }


def _lay_out_points(study: Study, config: Config) -> None:
    """A config.yaml in each point's run directory, in advance, so that `train --resume` is the one
    command for any state."""
    for point in study.points:
        if not (study.run_dir(point) / CONFIG_FILE).is_file():
            dump_config(point_config(config, point), study.run_dir(point) / CONFIG_FILE)


def _factors_text(factors: dict[str, list[str]]) -> str:
    if not factors:
        return "without --vary"
    return "with " + " ".join(f"--vary {key}={','.join(map(str, values))}" for key, values in factors.items())


def _started_points(study_dir: Path) -> list[str]:
    return [path.name for _, path in point_dirs(study_dir) if has_started(path)]


def code_name(code: dict) -> str:
    """A code version as the report and errors name it: the commit, else the version; (dirty) if changed."""
    return f"{code.get('commit') or code.get('version')}{' (dirty)' if code.get('dirty') else ''}"


def _check_same_code(study_dir: Path, ran: list[dict], allow_code_change: bool) -> None:
    """Every point of a study must be trained and evaluated by one code version: a later commit may
    compute the update or the validation differently, and the points would not be comparable."""
    now = code_version()
    if ran and now not in ran and not allow_code_change:
        raise MhatrainError(
            f"{study_dir}: its runs were made by {', '.join(code_name(c) for c in ran)} and this is "
            f"{code_name(now)}; a study's points must all come from one code version: run it with that code "
            f"(a checkout of it first on sys.path), use another --out, or pass --allow-code-change to mix them"
        )


def _append_new(items: list, item) -> list:
    return items if item in items else [*items, item]


def _discard_study(study_dir: Path, console: Console) -> None:
    removed = 0
    for path in sorted(study_dir.iterdir()):
        if path.is_dir() and parse_point_name(path.name) is not None:
            shutil.rmtree(path)
            removed += 1
        elif path.is_dir() and parse_cell(path.name) is not None:
            removed += sum(1 for sub in path.iterdir() if parse_point_name(sub.name) is not None)
            shutil.rmtree(path)
        elif path.name == LOGS_DIR and path.is_dir():
            shutil.rmtree(path)
        elif path.is_file() and (
            path.name.startswith(("report", "regime-map")) or path.name in (STUDY_FILE, BASE_CONFIG, PROVENANCE_FILE)
        ):
            path.unlink()
    console.print(f"--overwrite: deleted the {removed} run directories of the previous study in {study_dir}")


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


@contextlib.contextmanager
def study_lock(study_dir: Path, command: str = "ablate"):
    """One `ablate` (or `prune`: `command`) at a time per study directory (the lock goes with the
    process, even on SIGKILL)."""
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
        handle = open(study_dir / LOCK_FILE, "a+")
    except OSError as exc:
        raise MhatrainError(f"cannot create study directory {study_dir}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MhatrainError(
                f"another `mhatrain {command}` is running on {study_dir}; wait for it to finish"
            ) from None
        yield
    finally:
        handle.close()


def point_commands(study: Study, point: Point, slot: Slot = Slot()) -> list[list[str]]:
    """The three commands of a grid point on `slot`: train (or resume), then evaluate on validation and test."""
    python = [sys.executable, "-m", "mhatrain"]
    sets = [arg for item in point_overrides(point, slot) for arg in ("--set", item)]
    run_dir = str(study.run_dir(point))
    return [
        [*python, "train", str(study.base_config), "--out", run_dir, "--resume", *sets],
        *[[*python, "eval", run_dir, "--split", split] for split in EVAL_SPLITS],
    ]


def needed_commands(study: Study, point: Point, slot: Slot = Slot()) -> list[list[str]]:
    """The commands of a point that its state still needs: training unless it has trained, and the
    evaluations whose reports are missing."""
    train_cmd, *eval_cmds = point_commands(study, point, slot)
    needed = [train_cmd] if study.state(point) in ("pending", "training") else []
    missing = missing_evaluations(study.run_dir(point), study.beam)
    return needed + [cmd for cmd, split in zip(eval_cmds, EVAL_SPLITS) if split in missing]


def shell_line(commands: list[list[str]]) -> str:
    return " && ".join(shlex.join(argv) for argv in commands)


def _finished_files(study: Study, point: Point) -> tuple[dict, dict[str, dict]] | None:
    """A finished point's train_summary.json and its evaluation reports by split; None if one is
    missing or unreadable."""
    summary = read_summary(study.run_dir(point))
    evals = {split: read_eval(study.run_dir(point), split, study.beam) for split in EVAL_SPLITS}
    if summary is None or None in evals.values():
        return None
    return summary, evals


def point_outcome(study: Study, point: Point) -> str:
    files = _finished_files(study, point)
    if files is None:
        return ""
    summary, evals = files
    test = evals["test"]
    return f"{summary['parameters']:,} parameters, test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}"


def point_seconds(study: Study, point: Point) -> float | None:
    """A finished point's training, validation and evaluation time from its files: over all the
    sessions it took, where the clock of one invocation sees only the last."""
    files = _finished_files(study, point)
    if files is None:
        return None
    summary, evals = files
    try:
        return (
            float(summary["train_seconds"])
            + float(summary["valid_seconds"])
            + sum(float(report["decode_seconds"]) for report in evals.values())
        )
    except (KeyError, TypeError, ValueError):
        return None


def study_cells(study_dir: Path) -> list[Cell]:
    """The recorded cells (in grid order), then any other cell folder that holds points."""
    recorded = grid_cells(read_record(study_dir).get("factors") or {})
    found = [point.cell for point, _ in point_dirs(study_dir) if point.cell]
    return [cell for cell in dict.fromkeys([*recorded, *found]) if cell]
