"""Database URLs: what the user gives (`--db-url`) mapped to the asyncio drivers kubus runs on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sqlalchemy as sa

from store.errors import DatabaseUnavailable

Backend = Literal["sqlite", "postgresql"]

DB_FILE = "kubus.db"
URL_HINT = "check --db-url / KUBUS_DB_URL"
USAGE = "use sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE"

_DRIVERS: dict[str, tuple[Backend, str]] = {
    "sqlite": ("sqlite", "sqlite+aiosqlite"),
    "sqlite+aiosqlite": ("sqlite", "sqlite+aiosqlite"),
    "postgresql": ("postgresql", "postgresql+asyncpg"),
    "postgres": ("postgresql", "postgresql+asyncpg"),
    "postgresql+asyncpg": ("postgresql", "postgresql+asyncpg"),
}


@dataclass(frozen=True, slots=True)
class Database:
    """A database to open: its async URL and how to name it to a user."""

    url: sa.URL
    backend: Backend
    label: str  # "PostgreSQL at 127.0.0.1:5432/kubus", "SQLite at /data/kubus.db"; never a password
    hint: str  # how to point kubus at another one


def resolve(url: str | None, data_dir: str) -> Database:
    """The database for `url`, or the default SQLite file in `data_dir` (created if missing)."""
    if url is None:
        directory = Path(data_dir).expanduser().absolute()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnavailable(f"cannot create the data directory {directory} ({exc.strerror}); "
                                      "check --data-dir / KUBUS_DATA_DIR") from exc
        path = directory / DB_FILE
        return Database(sa.URL.create("sqlite+aiosqlite", database=str(path)), "sqlite", f"SQLite at {path}",
                      "check --data-dir / KUBUS_DATA_DIR, or set --db-url / KUBUS_DB_URL")
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise DatabaseUnavailable(f"cannot parse database URL {url!r}; {USAGE} ({URL_HINT})") from None
    if parsed.drivername not in _DRIVERS:
        raise DatabaseUnavailable(f"unsupported database URL scheme {parsed.drivername!r}; {USAGE} ({URL_HINT})")
    backend, driver = _DRIVERS[parsed.drivername]
    parsed = parsed.set(drivername=driver)
    if backend == "sqlite":
        label = f"SQLite at {parsed.database or ':memory:'}"
    else:
        label = f"PostgreSQL at {parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database or ''}"
    return Database(parsed, backend, label, URL_HINT)
