"""The lease tests run on SQLite and PostgreSQL with the store suite's fixtures (tests/store/conftest.py)."""

from __future__ import annotations

from tests.pipeline.conftest import bus
from tests.store.conftest import backend, clock, db_url, lease_clock, pg_url, store

__all__ = ["backend", "bus", "clock", "db_url", "lease_clock", "pg_url", "store"]
