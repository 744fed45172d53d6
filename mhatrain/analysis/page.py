"""One sentence's attention heads as a single self-contained HTML page (in the spirit of bertviz's
head view): pick an attention kind and a layer, see lines from query tokens to key tokens in one
colour per head, hover a token to see where each head's weight goes from it, toggle heads, and
click a head's thumbnail heatmap to see it alone.

The page works offline: its style, script and data are inline. The data is JSON inside
<script type="application/json">, with every character that could end that element or confuse an
HTML parser (<, >, &, U+2028, U+2029) written as a \\u escape, and the script inserts every token
and sentence with textContent, so text from a sentence is never read as markup.

Shape legend: L layers · H heads · Tq query tokens · Tk key tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..core.files import atomic_write_text

DECIMALS = 4  # attention weights in the page; finer steps change no pixel
# Characters that are legal in a JSON string but not inert inside an HTML <script> element
# (< > & could close it or start a comment; U+2028/2029 end a line in older JavaScript).
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


@dataclass
class AttentionView:
    """One attention kind of the sentence, as the page shows it: maps [L, H, Tq, Tk]."""

    kind: str  # enc-self | dec-self | cross
    title: str  # what a reader sees in the kind menu
    query_name: str  # heading of the left column (the tokens that attend)
    key_name: str  # heading of the right column (the tokens attended to)
    queries: list[str]  # Tq token labels
    keys: list[str]  # Tk token labels
    layers: list[int]  # L layer numbers, from 1
    maps: np.ndarray  # [L, H, Tq, Tk]; row i holds query i's weights over the keys

    def as_data(self) -> dict:
        L, H, Tq, Tk = np.shape(self.maps)
        if (L, Tq, Tk) != (len(self.layers), len(self.queries), len(self.keys)):
            raise ValueError(
                f"{self.kind}: maps of shape {np.shape(self.maps)} do not match "
                f"{len(self.layers)} layers, {len(self.queries)} queries and {len(self.keys)} keys"
            )
        return {
            "kind": self.kind,
            "title": self.title,
            "query_name": self.query_name,
            "key_name": self.key_name,
            "queries": list(self.queries),
            "keys": list(self.keys),
            "layers": list(self.layers),
            "heads": H,
            "maps": np.round(np.asarray(self.maps, dtype=np.float64), DECIMALS).tolist(),
        }


def script_json(data) -> str:
    """`data` as JSON that can stand inside an HTML <script> element and parses back to `data`."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return "".join(_SCRIPT_UNSAFE.get(ch, ch) for ch in text)


def _template(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def render_page(source: str, translation: str, views: list[AttentionView], caption: str = "") -> str:
    """The page's HTML text. caption: one line about where the maps come from (run, checkpoint)."""
    if not views:
        raise ValueError("an attention page needs at least one view")
    data = {"source": source, "translation": translation, "caption": caption, "views": [v.as_data() for v in views]}
    page = _template("attention.html")
    page = page.replace("/*{{style}}*/", _template("attention.css"))
    page = page.replace("/*{{script}}*/", _template("attention.js"))
    return page.replace("{{data}}", script_json(data))  # last: the data is never searched for markers


def write_attention_html(
    path: Path, source: str, translation: str, views: list[AttentionView], caption: str = ""
) -> Path:
    """Write the page to `path` (atomically) and return the path."""
    path = Path(path)
    atomic_write_text(path, render_page(source, translation, views, caption))
    return path
