"""Opening a store: URLs, the default SQLite file, and one-line errors for databases that fail."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import sqlalchemy as sa

from kubus import db_command as cli
from store.engine import DatabaseUnavailable, open_store


def unreachable(backend: str) -> tuple[str, str]:
    if backend == "sqlite":
        return ("sqlite:////nonexistent/dir/kubus.db",
                "cannot connect to SQLite at /nonexistent/dir/kubus.db (unable to open database file); "
                "check --db-url / KUBUS_DB_URL")
    return ("postgresql://postgres@127.0.0.1:1/kubus",
            "cannot connect to PostgreSQL at 127.0.0.1:1/kubus (connection refused); check --db-url / KUBUS_DB_URL")


async def test_unreachable_database_raises_one_line_message(backend: str, tmp_path: Path) -> None:
    """A database that does not connect is named, with the cause and the flag that fixes it."""
    url, message = unreachable(backend)
    with pytest.raises(DatabaseUnavailable) as info:
        await open_store(url, str(tmp_path))
    assert str(info.value) == message


@pytest.mark.parametrize(("url", "message"), [
    # None: the run's PostgreSQL with a database it lacks (its URL is known only once a test asks for the server)
    pytest.param(None, 'database "kubus_no_such_db" does not exist', id="missing-postgresql-database"),
    pytest.param("mysql://root@localhost/kubus", "unsupported database URL scheme 'mysql'", id="unsupported-scheme"),
    pytest.param("not a url", r"cannot parse the database URL \(not shown: it may hold a password\)", id="garbage"),
])
async def test_bad_urls_say_what_is_wrong(url: str | None, message: str, tmp_path: Path,
                                          request: pytest.FixtureRequest) -> None:
    """Other bad URLs fail the same way, on one line."""
    if url is None:
        admin = sa.make_url(request.getfixturevalue("pg_admin_url"))
        url = admin.set(database="kubus_no_such_db").render_as_string(hide_password=False)
    with pytest.raises(DatabaseUnavailable, match=message) as info:
        await open_store(url, str(tmp_path))
    assert "\n" not in str(info.value)


async def test_default_is_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    """Without a URL the store is a WAL-mode SQLite file in the data directory, created if missing."""
    data_dir = tmp_path / "data"
    store = await open_store(None, str(data_dir))
    try:
        assert store.label == f"SQLite at {data_dir / 'kubus.db'}"
        async with store.engine.connect() as conn:
            pragmas = [(await conn.execute(sa.text(f"PRAGMA {p}"))).scalar()
                       for p in ("journal_mode", "synchronous", "foreign_keys")]
        assert pragmas == ["wal", 1, 1]  # synchronous=1 is NORMAL
    finally:
        await store.close()


def test_db_upgrade_command(db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubus db upgrade` migrates and says to which revision; `kubus db current` then reports it."""
    parser = argparse.ArgumentParser(prog="kubus")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    for argv, code, out in ((["db", "upgrade"], 0, "kubus db upgrade: schema at revision 0008\n"),
                            (["db", "current"], 0, "0008 (this kubus needs 0008: up to date)\n")):
        args = parser.parse_args([*argv, "--db-url", db_url, "--data-dir", str(tmp_path)])
        assert args.run(args) == code
        assert capsys.readouterr().out == out
