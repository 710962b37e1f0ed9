"""Plain-text tables, as the CLI prints them (kubus status, kubus audit, kubus replay --explain).

One renderer so every table reads alike: columns left-aligned, two spaces apart, no trailing blanks.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["columns"]


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """One line per row (a header is just the first row), each column as wide as its widest cell."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
