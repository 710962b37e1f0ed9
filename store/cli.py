"""`kubus db upgrade` and `kubus db current`: manage the store's schema (PostgreSQL needs this once
per kubus upgrade; SQLite is migrated on every start anyway)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from store import engine
from store.migrating import head

DEFAULT_DATA_DIR = "./.kubus"


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "db", help="manage the SQL store's schema",
        description="Manage the schema of kubus's SQL store (SQLite in the data directory by default, "
                    "PostgreSQL with --db-url).")
    commands = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = commands.add_parser("upgrade", help="migrate the database to this kubus's schema (idempotent)",
                             description="Migrate the database to the newest schema revision this kubus knows; "
                                         "does nothing when it is there already.")
    add_database_arguments(up)
    up.set_defaults(run=run_upgrade)
    cur = commands.add_parser("current", help="print the database's schema revision",
                              description="Print the database's schema revision and the one this kubus needs.")
    add_database_arguments(cur)
    cur.set_defaults(run=run_current)


def add_database_arguments(p: argparse.ArgumentParser) -> None:
    """--db-url and --data-dir, defaulting to KUBUS_DB_URL and KUBUS_DATA_DIR (shared by services)."""
    g = p.add_argument_group("database")
    g.add_argument("--db-url", default=os.environ.get("KUBUS_DB_URL") or None, metavar="URL",
                   help="sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
                        "(default: $KUBUS_DB_URL, else SQLite in the data directory)")
    g.add_argument("--data-dir", default=os.environ.get("KUBUS_DATA_DIR") or DEFAULT_DATA_DIR, metavar="DIR",
                   help=f"where the default SQLite database lives (default: $KUBUS_DATA_DIR, else {DEFAULT_DATA_DIR})")


def run_upgrade(args: argparse.Namespace) -> int:
    try:
        revision = asyncio.run(engine.upgrade(args.db_url, args.data_dir))
    except engine.DatabaseUnavailable as exc:
        print(f"kubus db upgrade: {exc}", file=sys.stderr)
        return 1
    print(f"kubus db upgrade: schema at revision {revision}")
    return 0


def run_current(args: argparse.Namespace) -> int:
    try:
        revision = asyncio.run(engine.current(args.db_url, args.data_dir))
    except engine.DatabaseUnavailable as exc:
        print(f"kubus db current: {exc}", file=sys.stderr)
        return 1
    need = head()
    state = "up to date" if revision == need else "run `kubus db upgrade`"
    print(f"{revision or 'none'} (this kubus needs {need}: {state})")
    return 0 if revision == need else 3
