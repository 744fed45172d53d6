"""How a figure becomes a file: matplotlib's Agg canvas (no display, no pyplot state), a resolution
that keeps the longest side of the PNG bounded, an atomic write; and the colours of n series.

Every figure of the package (head maps and importance, learning curves, a study's figure against h)
is saved here, so a figure is never half-written and never too large to open.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .files import atomic_write

MAX_PIXELS = 16_000  # longest side of a saved PNG; dpi shrinks to stay under it


def save_figure(fig: Figure, path: Path, width_in: float, height_in: float) -> None:
    """Write `fig` as a PNG of width_in × height_in inches, at ≤ 110 dpi and ≤ MAX_PIXELS on its longest side."""
    dpi = max(30, min(110, int(MAX_PIXELS / max(width_in, height_in))))
    FigureCanvasAgg(fig)
    atomic_write(Path(path), lambda f: fig.savefig(f, format="png", dpi=dpi), binary=True)


def series_colours(n: int) -> list:
    """n distinct colours (tab10, then a continuous map for more)."""
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]
