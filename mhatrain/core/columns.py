"""The width asked of output that does not go to a terminal.

In a terminal, rich measures the window. Piped to a file or a pager there is no window: a table is
printed at its full width (a log file keeps every column) unless $COLUMNS asks for a width, as a
user of `less` or a script may (`COLUMNS=100 mhatrain report STUDY | less`); then output keeps to it.
"""

from __future__ import annotations

import os


def asked_columns() -> int | None:
    """$COLUMNS when it is set to a positive width, else None."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def unwrapped(console) -> bool:
    """Whether `console` (a rich Console) goes where lines are best left whole, tables at full width:
    not a terminal, and no $COLUMNS asked for."""
    return not console.is_terminal and asked_columns() is None
