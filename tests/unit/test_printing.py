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


# --- table: fitting 120 columns, -o wide ---------------------------------------------------------------------------

def test_a_table_fits_by_cutting_the_free_text_columns() -> None:
    from runtime.printing import Column, table

    rows = [["2025-06-01T10:01:01.000Z", "x" * 80, "y" * 90, 3]]
    heads = [Column("AT"), Column("TRIGGER", shrink=True), Column("REASON", shrink=True), Column("N")]
    lines = table(heads, rows, width=120)
    assert max(len(line) for line in lines) <= 120
    assert lines[1].startswith("2025-06-01T10:01:01.000Z  xxx") and lines[1].endswith("...  3")
    assert table(heads, rows, wide=True)[1] == f"2025-06-01T10:01:01.000Z  {'x' * 80}  {'y' * 90}  3"


def test_wide_columns_only_with_wide() -> None:
    from runtime.printing import Column, table

    heads = [Column("NAME"), Column("KEY", wide=True), Column("AGE")]
    assert table(heads, [["web", "k/1", None]]) == ["NAME  AGE", "web   -"]
    assert table(heads, [["web", "k/1", None]], wide=True) == ["NAME  KEY  AGE", "web   k/1  -"]


def test_prose_wraps_at_spaces() -> None:
    from runtime.printing import wrap

    assert wrap("short") == ["short"]
    lines = wrap("  " + " ".join(["word"] * 40), width=50)
    assert all(len(line) <= 50 for line in lines) and lines[1].startswith("    word")
