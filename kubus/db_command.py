"""`kubus db upgrade` and `kubus db current`: manage the store's schema (PostgreSQL needs this once
per kubus upgrade; SQLite is migrated on every start anyway). `kubus db prune`: the audit trail's
retention, once (store/retention.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from runtime import flags, redact
from runtime.exitcodes import NO as EXIT_NO
from runtime.progress import Progress
from store import engine
from store.migrating import head
from store.retention import parse_duration


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "db", help="manage the SQL store's schema",
        description="Manage the schema of kubus's SQL store (SQLite in the data directory by default, "
                    "PostgreSQL with --db-url).")
    commands = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = commands.add_parser("upgrade", help="migrate the database to this kubus's schema (idempotent)",
                             description="Migrate the database to the newest schema revision this kubus knows; "
                                         "does nothing when it is there already.")
    flags.add_database(up.add_argument_group("database"))
    up.set_defaults(run=run_upgrade)
    cur = commands.add_parser("current", help="print the database's schema revision",
                              description="Print the database's schema revision and the one this kubus needs.")
    flags.add_database(cur.add_argument_group("database"))
    cur.set_defaults(run=run_current)
    prune = commands.add_parser(
        "prune", help="delete the audit trail's rows older than a duration",
        description="Delete observed events, decisions, sent outbox rows, action results and reconciler ticks "
                    "older than --older-than (what `kubus reconcile --retention` does periodically). Pending "
                    "outbox rows and their decisions are kept.")
    prune.add_argument("--older-than", required=True, metavar="DURATION", type=_duration,
                       help="e.g. 7d, 12h, 90m")
    flags.add_database(prune.add_argument_group("database"))
    prune.set_defaults(run=run_prune)


def run_upgrade(args: argparse.Namespace) -> int:
    try:
        revision = asyncio.run(engine.upgrade(args.db_url, args.data_dir))
    except engine.DatabaseUnavailable as exc:
        print(f"kubus db upgrade: {redact.text(str(exc))}", file=sys.stderr)
        return 2
    print(f"kubus db upgrade: schema at revision {revision}")
    return 0


def run_current(args: argparse.Namespace) -> int:
    try:
        revision = asyncio.run(engine.current(args.db_url, args.data_dir))
    except engine.DatabaseUnavailable as exc:
        print(f"kubus db current: {redact.text(str(exc))}", file=sys.stderr)
        return 2
    need = head()
    state = "up to date" if revision == need else "run `kubus db upgrade`"
    print(f"{revision or 'none'} (this kubus needs {need}: {state})")
    return 0 if revision == need else EXIT_NO  # "is the schema this kubus's?" no: run `kubus db upgrade`


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_prune(args: argparse.Namespace) -> int:
    cutoff = datetime.now(UTC) - args.older_than

    async def prune() -> dict[str, int]:
        store = await engine.open_store(args.db_url, args.data_dir,
                                        statement_timeout=flags.statement_timeout(args))
        try:
            with Progress("kubus db prune", "rows") as progress:
                return (await store.prune(cutoff, progress=progress.update)).as_dict()
        finally:
            await store.close()

    try:
        counts = asyncio.run(prune())
    except engine.DatabaseUnavailable as exc:
        print(f"kubus db prune: {redact.text(str(exc))}", file=sys.stderr)
        return 2
    done = ", ".join(f"{n} {table.replace('_', ' ')}{' rows' if table == 'outbox' else ''}"
                     for table, n in counts.items())
    print(f"kubus db prune: deleted {done} older than {cutoff.isoformat(timespec='seconds').replace('+00:00', 'Z')}")
    return 0
