"""Errors the store raises for a database it cannot use, each with a one-line, actionable message."""

from __future__ import annotations

import socket


class DatabaseUnavailable(Exception):
    """The database cannot be reached or opened; the message says which and how to fix it."""


class SchemaMismatch(DatabaseUnavailable):
    """The database is reachable but its schema is not the revision this kubus needs."""


def describe(exc: BaseException) -> str:
    """The root cause of a connection failure, in a few words (no traceback, no credentials)."""
    root = exc
    while (cause := getattr(root, "orig", None) or root.__cause__) is not None and cause is not root:
        root = cause
    text = next((line.strip() for line in str(root).splitlines() if line.strip()), type(root).__name__)
    # asyncpg tries every address of a host and reports "Multiple exceptions: [Errno 111] Connect
    # call failed ..." for all of them: the user only needs to know nothing listened.
    if isinstance(root, ConnectionRefusedError) or "Connect call failed" in text:
        return "connection refused"
    if isinstance(root, socket.gaierror):
        return "unknown host"
    if isinstance(root, TimeoutError):
        return "timed out"
    return text


# SQLSTATE classes and codes that say "the database is away or busy, try again", not "this transaction is
# wrong": a connection exception (08), the server shutting down or restarting, or a statement cancelled
# by statement_timeout (57: 57P01-3, 57014), a lock not had within lock_timeout (55P03), a serialization
# failure or deadlock (40001, 40P01: the transaction is retried), out of resources (53: a full disk, too
# many connections), a system or I/O error (58).
_AWAY_CLASSES = ("08", "57", "53", "58")
_AWAY_CODES = ("55P03", "40001", "40P01")


def database_away(exc: BaseException) -> bool:
    """Whether `exc`, raised by a store call, means the database was unreachable, restarting, or too slow
    (a statement timeout): the caller waits and tries the whole unit of work again, as it would for a
    database that is down. False for errors a retry cannot fix (a constraint, a bug, a schema mismatch)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SchemaMismatch):
            return False
        if isinstance(current, DatabaseUnavailable | OSError | TimeoutError):  # ConnectionError is an OSError
            return True
        if getattr(current, "connection_invalidated", False):  # SQLAlchemy: the connection died under it
            return True
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(state, str) and (state[:2] in _AWAY_CLASSES or state in _AWAY_CODES):
            return True
        name = type(current).__name__
        # asyncpg: the connection was closed under a query (no SQLSTATE); SQLite: a writer held the lock
        if name in ("ConnectionDoesNotExistError", "InterfaceError", "InternalClientError") or \
                "database is locked" in str(current):
            return True
        current = getattr(current, "orig", None) or current.__cause__
    return False
