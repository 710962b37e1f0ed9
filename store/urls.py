"""Database URLs: what the user gives (`--db-url`) mapped to the asyncio drivers kubus runs on.

A PostgreSQL URL is read as libpq reads it: its `sslmode`, `sslrootcert`, `sslcert`, `sslkey` (and the other
libpq parameters asyncpg knows) go to asyncpg whole, as a DSN, rather than through SQLAlchemy, which would
hand them to asyncpg.connect() as keyword arguments it does not take. A URL without a password lets asyncpg
find one the libpq way, in PGPASSWORD or the PGPASSFILE (~/.pgpass): so no password needs to be on a command
line. No message here quotes the URL: it may hold the password.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import sqlalchemy as sa

from store.errors import DatabaseUnavailable

Backend = Literal["sqlite", "postgresql"]

DB_FILE = "kubus.db"
URL_HINT = "check --db-url / KUBUS_DB_URL"
USAGE = ("use sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE[?sslmode=verify-full&sslrootcert=CA.pem] "
         "with the password in PGPASSWORD or PGPASSFILE")
# libpq's sslmode values (asyncpg implements each as libpq does)
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

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
    # PostgreSQL: the URL as asyncpg reads it, libpq parameters and password included: never shown, so not in repr
    dsn: str | None = field(default=None, repr=False)


def create_private(path: str) -> None:
    """Create the SQLite file `path` readable by its owner only (0600), unless it exists: it holds full pod
    bodies. SQLite gives the -wal and -shm files it creates beside it the database file's permissions."""
    # exists already, or cannot be made (no such directory, no permission): SQLite says so in its own words
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def resolve(url: str | None, data_dir: str) -> Database:
    """The database for `url`, or the default SQLite file in `data_dir` (created if missing)."""
    if url is None:
        directory = Path(data_dir).expanduser().absolute()
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # what it will hold: full pod bodies
        except OSError as exc:
            raise DatabaseUnavailable(f"cannot create the data directory {directory} ({exc.strerror}); "
                                      "check --data-dir / KUBUS_DATA_DIR") from exc
        path = directory / DB_FILE
        return Database(sa.URL.create("sqlite+aiosqlite", database=str(path)), "sqlite", f"SQLite at {path}",
                      "check --data-dir / KUBUS_DATA_DIR, or set --db-url / KUBUS_DB_URL")
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        scheme = url.split(":", 1)[0] if ":" in url else ""
        shown = f"(it starts {scheme + ':'!r}; the rest is not shown, it may hold a password)" if scheme.isalnum() \
            else "(not shown: it may hold a password)"
        raise DatabaseUnavailable(f"cannot parse the database URL {shown}; {USAGE} ({URL_HINT})") from None
    if parsed.drivername not in _DRIVERS:
        raise DatabaseUnavailable(f"unsupported database URL scheme {parsed.drivername!r}; {USAGE} ({URL_HINT})")
    backend, driver = _DRIVERS[parsed.drivername]
    parsed = parsed.set(drivername=driver)
    if backend == "sqlite":
        label = f"SQLite at {parsed.database or ':memory:'}"
        return Database(parsed, backend, label, URL_HINT)
    label = f"PostgreSQL at {parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database or ''}"
    sslmode = parsed.query.get("sslmode")
    if sslmode is not None and sslmode not in SSLMODES:
        raise DatabaseUnavailable(f"sslmode={sslmode!r} in the database URL is not one of {', '.join(SSLMODES)} "
                                  f"({URL_HINT})")
    for parameter in ("sslrootcert", "sslcert", "sslkey"):
        # checked here: the ssl module's FileNotFoundError does not say which file
        file = parsed.query.get(parameter)
        if isinstance(file, str) and file != "system" and not Path(file).expanduser().is_file():
            raise DatabaseUnavailable(f"{parameter}={file} in the database URL: no such file ({URL_HINT})")
    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    # SQLAlchemy only picks the dialect from the URL: the connection is asyncpg's, from the DSN (store/engine.py)
    return Database(parsed.set(query={}), backend, label, URL_HINT, dsn)
