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
