"""runtime.printing.columns: the CLI's one plain-text table."""

from __future__ import annotations

import pytest

from runtime.printing import columns


@pytest.mark.parametrize(("rows", "lines"), [
    pytest.param([["NAME", "AGE"], ["web-1", "5s"], ["a", "10m"]], ["NAME   AGE", "web-1  5s", "a      10m"],
                 id="widest-cell-sets-the-width"),
    pytest.param([["A", "B", "C"], ["x", "", ""]], ["A  B  C", "x"], id="no-trailing-blanks"),
    pytest.param([["ONLY", "HEADER"]], ["ONLY  HEADER"], id="header-alone"),
    pytest.param([], [], id="nothing"),
])
def test_columns_are_left_aligned_two_spaces_apart(rows: list[list[str]], lines: list[str]) -> None:
    """Each column as wide as its widest cell, two spaces between columns, trailing blanks stripped."""
    assert columns(rows) == lines
