"""What the commands print for people: tables on a terminal, whole rows anywhere else.

On a terminal a table is drawn with rich, long texts cut to fit the screen. Piped
into ``grep``, ``cut`` or a file, the same table is tab-separated values instead:
a header line, then one line per row with every value whole (sizes in bytes,
texts uncut), so nothing a script reads was shortened to 80 columns. Lines of
prose are never wrapped in a pipe either. Sizes for people go through
``human_size`` (``5 GiB``, not ``5368709120``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console(highlight=False)
"""stdout for people (rich decides at each print whether stdout is a terminal)."""

PIPE_WIDTH = 100_000
"""Width rich lays a renderable out in when stdout is not a terminal: no line is folded."""
TEXT_WIDTH = 60
"""Widest a text column is drawn on a terminal (a pipe gets the whole text)."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its header, and how a terminal shows it."""

    name: str
    numeric: bool = False
    """Right-aligned on a terminal."""
    size: bool = False
    """A byte count: ``1.2 MiB`` on a terminal, the number of bytes in a pipe."""
    text: bool = False
    """Free text: cut with an ellipsis on a terminal (a pipe gets it whole)."""


def is_terminal() -> bool:
    """Whether stdout is a terminal (then tables are drawn; otherwise rows are TSV)."""
    return console.is_terminal


def say(message: str | Text) -> None:
    """One line (or paragraph) for people; rich markup allowed; never wrapped in a pipe."""
    console.print(message, soft_wrap=not console.is_terminal)


def show(renderable: Any) -> None:
    """A rich renderable (a grid, a panel) for people; as wide as it needs in a pipe."""
    console.print(renderable, width=None if console.is_terminal else PIPE_WIDTH)


def table(columns: Sequence[Column], rows: Iterable[Sequence[Any]], *,
          title: str | None = None) -> None:
    """Print rows as a table on a terminal, as tab-separated values anywhere else.

    Cells are shown as given (``None`` is empty). In a pipe a title becomes a ``# title``
    line above the header (commands that print several tables, such as ``stats``, say
    which is which; ``ls`` has none, so its first line is the header).
    """
    rows = list(rows)
    if not console.is_terminal:
        if title:
            sys.stdout.write(f"# {title}\n")
        # A line per write: a reader that leaves (``| head``) is then seen at the next
        # line, even on an unbuffered stdout, where one big write could end half-written
        # with no error (PYTHONUNBUFFERED: TextIOWrapper ignores a short write).
        sys.stdout.write("\t".join(c.name for c in columns) + "\n")
        for row in rows:
            sys.stdout.write("\t".join(_tsv(value) for value in row) + "\n")
        return
    cells = [[_cell(column, value) for column, value in zip(columns, row, strict=True)]
             for row in rows]
    widths = _widths(columns, cells, console.width)
    drawn = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column, width in zip(columns, widths, strict=True):
        drawn.add_column(column.name, width=width, no_wrap=True, overflow="ellipsis",
                         justify="right" if column.numeric or column.size else "left")
    for row in cells:
        drawn.add_row(*(Text(cell) for cell in row))
    console.print(drawn)


def _widths(columns: Sequence[Column], cells: list[list[str]], screen: int) -> list[int]:
    """Each column's width on a screen this wide: only text columns give way (a key, a
    size or a count is shown whole: what the key column shows must paste back), and the
    room left is shared among them, the narrowest needs served first."""
    widest = [max([len(c.name), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    widths = [w if not c.text else 0 for w, c in zip(widest, columns, strict=True)]
    room = screen - 3 * len(columns) - 1 - sum(widths)  # padding and the edges
    texts = sorted((min(widest[i], TEXT_WIDTH), i) for i, c in enumerate(columns) if c.text)
    for left, (need, i) in zip(range(len(texts), 0, -1), texts, strict=True):
        widths[i] = max(min(need, room // left), min(need, 4))
        room -= widths[i]
    return widths


def _cell(column: Column, value: Any) -> str:
    if value is None:
        return ""
    if column.size and isinstance(value, int):
        return human_size(value)
    if column.numeric and isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _tsv(value: Any) -> str:
    """One TSV field: backslash, tab and line breaks escaped (a text may hold any of them)."""
    if value is None:
        return ""
    return (str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(size: int | None) -> str:
    """``5 GiB``, ``1.2 MiB``, ``512 B`` (binary units: the defaults are binary sizes)."""
    if size is None:
        return "none"
    if abs(size) < 1024:
        return f"{size} B"
    value = float(size)
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == _UNITS[-1]:
            shown = f"{value:.1f}" if value < 100 else f"{value:.0f}"
            return f"{shown.removesuffix('.0')} {unit}"
    raise AssertionError("unreachable")
