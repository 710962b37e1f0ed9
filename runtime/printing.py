"""What the CLI prints: its one table renderer (kubus status, kubus audit, kubus replay --explain) and its one
`-o json|yaml|wide`.

One renderer so every table reads alike: columns left-aligned, two spaces apart, no trailing blanks, '-' for an empty
cell. `table` also fits a terminal of WIDTH columns by default: the columns marked wide are shown with `-o wide`
only, and the cells of the columns that may shrink (free text: reasons, messages, triggers) are cut, ending in
"...", until the line fits; `-o wide` shows every column in full.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["WIDTH", "Column", "add_output", "cell", "columns", "dump", "fit", "table", "wrap"]

WIDTH = 120  # the columns a default table fits in
MIN_SHRUNK = 12  # a shrinking column is never cut narrower than this
CUT = "..."

OUTPUTS = ("json", "yaml", "wide")


@dataclass(frozen=True)
class Column:
    header: str
    wide: bool = False  # shown with -o wide only
    shrink: bool = False  # free text: cut to fit WIDTH (in full with -o wide)


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """One line per row (a header is just the first row), each column as wide as its widest cell."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cell(value: Any) -> str:
    """A value as a table shows it: '-' for nothing, times in UTC to the millisecond, one line."""
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return " ".join(str(value).split())  # one line per row


def fit(text: str, width: int = WIDTH) -> str:
    """`text` cut to `width` characters, ending in "..." when cut."""
    return text if len(text) <= width else text[:max(width - len(CUT), 0)] + CUT


def wrap(text: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """A line of prose (a headline above a table) broken at spaces to fit `width`, continued under `indent` more
    than its own indentation; a word longer than the line is cut ("...")."""
    if len(text) <= width:
        return [text]
    own = text[:len(text) - len(text.lstrip())]
    lines = textwrap.wrap(text.strip(), width=width, initial_indent=own, subsequent_indent=own + indent,
                          break_long_words=False, break_on_hyphens=False)
    return [fit(line, width) for line in lines]


def table(heads: Sequence[Column | str], rows: Sequence[Sequence[Any]], *, wide: bool = False,
          width: int = WIDTH) -> list[str]:
    """The lines of a table of `rows` (values, shown as `cell` shows them) under `heads`. Not `wide`: the wide
    columns left out and the shrinking ones cut until every line fits `width` (when the others leave room)."""
    cols = [head if isinstance(head, Column) else Column(head) for head in heads]
    keep = [i for i, col in enumerate(cols) if wide or not col.wide]
    grid = [[cols[i].header for i in keep], *([cell(row[i]) for i in keep] for row in rows)]
    if not wide:
        widths = [max(len(line[j]) for line in grid) for j in range(len(keep))]
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        while excess > 0:
            shrinkable = [j for j in range(len(keep)) if cols[keep[j]].shrink and widths[j] > MIN_SHRUNK]
            if not shrinkable:
                break
            j = max(shrinkable, key=lambda k: widths[k])  # the widest first: they end up alike
            widths[j] -= 1
            excess -= 1
        grid = [[fit(text, widths[j]) for j, text in enumerate(line)] for line in grid]
    return columns(grid)


def add_output(parser: argparse.ArgumentParser, formats: Sequence[str] = OUTPUTS, *, json_flag: bool = False,
               what: str = "tables") -> None:
    """-o/--output FORMAT (default: text fitting WIDTH columns); `json_flag`: the earlier --json too, as a
    deprecated spelling of -o json (hidden from the help)."""
    wide = f"; wide: the {what} in full, every column" if "wide" in formats else ""
    parser.add_argument("-o", "--output", choices=formats, default=None, metavar="|".join(formats),
                        help=f"print {' or '.join(f for f in formats if f != 'wide')} instead of {what}{wide}")
    if json_flag:
        parser.add_argument("--json", dest="output", action="store_const", const="json", help=argparse.SUPPRESS)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def dump(value: Any, output: str) -> str:
    """`value` as JSON (indented) or YAML, times in UTC to the millisecond."""
    plain = _plain(value)
    if output == "yaml":
        import yaml  # type: ignore[import-untyped]

        text: str = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True)
        return text
    return json.dumps(plain, indent=2) + "\n"
