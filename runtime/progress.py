"""Progress on stderr for the long commands (replay, events export and import, db prune), on a terminal only: a
pipe, a file or a CI log gets nothing but the command's own last line (tqdm draws it)."""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any, TextIO


class Progress:
    """A count going up, with its rate: `with Progress("replay", "ticks") as progress: progress.update(1)`. Drawn
    only when `stream` (default stderr) is a terminal, and cleared when done."""

    def __init__(self, what: str, unit: str, stream: TextIO | None = None, total: int | None = None) -> None:
        out = stream or sys.stderr
        self._bar: Any = None
        if _is_terminal(out):
            from tqdm import tqdm  # type: ignore[import-untyped]

            columns, rows = _size(out)

            self._bar = tqdm(desc=what, unit=unit, total=total, file=out, leave=False, ncols=columns, nrows=rows,
                             mininterval=0.25, unit_scale=True)

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def update(self, n: int = 1) -> None:
        if self._bar is not None and n:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _size(stream: TextIO) -> tuple[int, int]:
    """The terminal's columns and rows; 80 x 24 where it does not say (one whose size was never set says 0 x 0, and
    tqdm draws nothing on a terminal of 0 rows)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError):
        return 80, 24
    return size.columns or 80, size.lines or 24


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False
