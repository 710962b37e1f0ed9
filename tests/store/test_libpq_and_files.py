"""PostgreSQL URLs are read as libpq reads them (sslmode, sslrootcert, sslcert, sslkey; the password from
PGPASSWORD or PGPASSFILE), and the SQLite store's files are its owner's alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

from store.engine import DatabaseUnavailable, current, open_store
from store.urls import resolve


def with_query(url: str, **query: str) -> str:
    return sa.make_url(url).update_query_dict(query).render_as_string(hide_password=False)


async def server_has_ssl(url: str) -> bool:
    conn = await asyncpg.connect(url, ssl="disable")
    try:
        return bool(await conn.fetchval("SHOW ssl") == "on")
    finally:
        await conn.close()


@pytest.mark.parametrize("sslmode", ["disable", "allow", "prefer"])
async def test_sslmodes_that_allow_plain_connections_connect(pg_url: str, tmp_path: Path, sslmode: str) -> None:
    """Before: TypeError, connect() got an unexpected keyword argument 'sslmode'."""
    await current(with_query(pg_url, sslmode=sslmode), str(tmp_path))


async def test_sslmode_require_against_a_server_without_ssl_fails_in_one_line(pg_url: str, tmp_path: Path) -> None:
    if await server_has_ssl(pg_url):
        await current(with_query(pg_url, sslmode="require"), str(tmp_path))
        return
    with pytest.raises(DatabaseUnavailable) as refused:
        await current(with_query(pg_url, sslmode="require"), str(tmp_path))
    message = str(refused.value)
    assert message.startswith("cannot connect to PostgreSQL at "), message
    assert "SSL" in message and "TypeError" not in message and "\n" not in message


async def test_a_missing_root_certificate_is_named(pg_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(DatabaseUnavailable, match=f"sslrootcert={missing} in the database URL: no such file") \
            as refused:
        await current(with_query(pg_url, sslmode="verify-full", sslrootcert=str(missing)), str(tmp_path))
    assert "\n" not in str(refused.value)


def test_the_libpq_parameters_reach_asyncpg_whole(tmp_path: Path) -> None:
    """The DSN asyncpg connects with keeps the ssl* parameters; the URL SQLAlchemy sees has none, and neither
    its repr nor the label shows the password."""
    files = {name: tmp_path / f"{name}.pem" for name in ("sslrootcert", "sslcert", "sslkey")}
    for file in files.values():
        file.touch()
    target = resolve(with_query("postgresql://kubus:pw@db:5433/kubus", sslmode="verify-ca",
                                **{k: str(v) for k, v in files.items()}), ".")
    assert target.dsn is not None
    assert sa.make_url(target.dsn).query == {"sslmode": "verify-ca", **{k: str(v) for k, v in files.items()}}
    assert target.url.query == {}
    assert "pw" not in repr(target) and "pw" not in target.label


@pytest.mark.parametrize("source", ["PGPASSWORD", "PGPASSFILE"])
def test_the_password_comes_from_the_environment_when_the_url_has_none(source: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncpg, given the DSN kubus hands it, looks the password up as libpq does. (The tests' PostgreSQL trusts
    every login, so this asks asyncpg's own parser what it would send.)"""
    from asyncpg import connect_utils

    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("PGPASSFILE", raising=False)
    if source == "PGPASSWORD":
        monkeypatch.setenv("PGPASSWORD", "from-env")
    else:
        passfile = tmp_path / "pgpass"
        passfile.write_text("db:5432:kubus:kubus:from-file\n")
        passfile.chmod(0o600)
        monkeypatch.setenv("PGPASSFILE", str(passfile))
    dsn = resolve("postgresql://kubus@db:5432/kubus?sslmode=disable", ".").dsn
    _, params = connect_utils._parse_connect_dsn_and_args(
        dsn=dsn, host=None, port=None, user=None, password=None, passfile=None, database=None, ssl=None,
        direct_tls=None, server_settings=None, target_session_attrs=None, krbsrvname=None, gsslib=None,
        service=None, servicefile=None)
    assert params.password == ("from-env" if source == "PGPASSWORD" else "from-file")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_sqlite_files_and_the_data_directory_are_private(tmp_path: Path) -> None:
    """kubus.db holds full pod bodies: 0600, its -wal and -shm too, in a 0700 data directory."""
    old = os.umask(0o022)
    try:
        data_dir = tmp_path / "data"
        store = await open_store(None, str(data_dir))
        try:
            async with store.transaction():
                pass  # a write: the -wal and -shm files exist from here
            files = sorted(p.name for p in data_dir.iterdir())
            assert files == ["kubus.db", "kubus.db-shm", "kubus.db-wal"], files
            assert {name: mode(data_dir / name) for name in files} == dict.fromkeys(files, 0o600)
            assert mode(data_dir) == 0o700
        finally:
            await store.close()
        explicit = tmp_path / "elsewhere.db"
        store = await open_store(f"sqlite:///{explicit}", str(data_dir))
        await store.close()
        assert mode(explicit) == 0o600
    finally:
        os.umask(old)


async def test_an_existing_database_file_keeps_its_mode(tmp_path: Path) -> None:
    """The operator's choice for a file that exists is theirs: only new files are made private."""
    db = tmp_path / "kubus.db"
    db.touch(mode=0o640)
    db.chmod(0o640)
    store = await open_store(f"sqlite:///{db}", str(tmp_path))
    await store.close()
    assert mode(db) == 0o640

