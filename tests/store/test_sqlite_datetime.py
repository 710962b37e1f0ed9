"""SQLite: store timestamps are bound by one function of kubus's (store.tables.UtcDateTime.bind_processor) that writes
exactly the text SQLAlchemy's TypeDecorator and SQLite DATETIME wrote (bench/RESULTS.md has its cost)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.types import TypeDecorator

from store.tables import UtcDateTime, _sqlite_text

VALUES = [
    datetime(2026, 11, 28, 12, 1, 2, 345678, tzinfo=UTC),
    datetime(2026, 11, 28, 12, 1, 2, tzinfo=UTC),  # no microseconds: still six digits
    datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC),  # a year of three digits: four
    datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=2))),  # another offset: in UTC
    datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    None,
]


def _sqlalchemys(dialect: object) -> object:
    """The processor SQLAlchemy would compose: process_bind_param, then the dialect's DATETIME's."""
    impl = UtcDateTime().dialect_impl(dialect)  # type: ignore[arg-type]
    return TypeDecorator.bind_processor(impl, dialect)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", VALUES)
def test_the_text_is_sqlalchemys(value: datetime | None) -> None:
    dialect = sqlite.dialect()
    ours = UtcDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert ours(value) == _sqlalchemys(dialect)(value)  # type: ignore[operator]


def test_naive_is_refused() -> None:
    dialect = sqlite.dialect()
    with pytest.raises(ValueError, match="naive datetime"):
        UtcDateTime().dialect_impl(dialect).bind_processor(dialect)(datetime(2026, 11, 28))


def test_postgresql_keeps_sqlalchemys() -> None:
    dialect = postgresql.dialect()
    processor = UtcDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert processor is not _sqlite_text
    assert processor(VALUES[3]) == VALUES[3].astimezone(UTC)  # process_bind_param: a datetime, asyncpg's to bind

