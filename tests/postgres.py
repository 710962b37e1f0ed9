"""The tests' PostgreSQL: one server per test run, and fresh databases on it.

Every test that needs PostgreSQL gets its server from the session fixture `pg_admin_url`
(tests/conftest.py), which asks `server()` here, once, when the first such test runs. The server is:

1. the one `KUBUS_TEST_PG_URL` names, when that is set;
2. else the machine's, `postgresql://postgres@127.0.0.1:5432/test`, when something answers there;
3. else a throwaway one of our own (`EmbeddedPostgres`), run from the binaries of the `pgserver`
   wheel (a dev dependency), on a free port of 127.0.0.1 with its data in a temporary directory,
   stopped and deleted when the run ends.

`KUBUS_TEST_PG=embedded` forces 3 (to test the fallback on a machine whose PostgreSQL runs).
A test takes a database of its own with `fresh_database(pg_admin_url)`, dropped when it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

from runtime.ports import free_port

URL_VARIABLE = "KUBUS_TEST_PG_URL"
MODE_VARIABLE = "KUBUS_TEST_PG"
EMBEDDED = "embedded"
LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/test"
# PostgreSQL refuses to run as root: as root, the embedded server runs as this user
UNPRIVILEGED_USER = "nobody"


class EmbeddedPostgres:
    """A PostgreSQL server of this process's own, on a free port of 127.0.0.1, trusting every local login.

    Its directory holds the data, the server's log and what its commands printed; `stop` deletes it.
    """

    def __init__(self) -> None:
        self._bin = _pgserver_bin()
        self.directory = Path(tempfile.mkdtemp(prefix="kubus-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.commands_log = self.directory / "commands.log"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._user: pwd.struct_passwd | None = None

    def start(self) -> str:
        """Initialise the data directory and start the server; its admin URL."""
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam(UNPRIVILEGED_USER)
            except KeyError:
                raise RuntimeError(f"PostgreSQL does not run as root and there is no user {UNPRIVILEGED_USER!r} to "
                                   f"run it as; run the tests as another user, or set {URL_VARIABLE}") from None
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
            self._bin = self._copy_binaries()
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                  "--no-locale", "--no-sync", timeout=120)
        self.start_server()
        return self.url

    def start_server(self) -> None:
        """Start the server on its data directory (after `start`, again after `crash`); waits until it accepts."""
        # fsync off: the data is thrown away at the end, and a crash of the machine is not something to survive
        # (a crash of the server is: its WAL is in the OS's page cache, which outlives the server's processes)
        options = f"-h 127.0.0.1 -p {self.port} -k {self.directory} -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start",
                  timeout=90)

    def running(self) -> bool:
        """A postmaster runs on the data directory (pg_ctl removes its pid file once a stop is complete)."""
        return (self.data / "postmaster.pid").exists()

    def crash(self) -> None:
        """Stop the server the way a crash does (`pg_ctl stop -m immediate`: every process quits at once, no
        checkpoint, open transactions lost): its next start replays the WAL."""
        self.stop_server("immediate")

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data: `fast` rolls back open transactions and closes every connection,
        `immediate` aborts at once (a crash: the next start recovers from the WAL)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", timeout=90)

    def stop(self) -> None:
        """Stop the server (dropping its connections) and delete its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop", timeout=90)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _copy_binaries(self) -> Path:
        """The wheel's binaries, copied where the unprivileged user can surely read them (a venv under /root,
        say, it cannot), keeping the layout their relative library path (`$ORIGIN/../../../pgserver.libs`)
        expects."""
        installed = self._bin.parent  # site-packages/pgserver/pginstall
        site = installed.parent.parent
        copy = self.directory / "binaries"
        shutil.copytree(installed, copy / "pgserver" / "pginstall", symlinks=True,
                        ignore=shutil.ignore_patterns("include", "*.a"))
        if (site / "pgserver.libs").is_dir():
            shutil.copytree(site / "pgserver.libs", copy / "pgserver.libs", symlinks=True)
        return copy / "pgserver" / "pginstall" / "bin"

    def _run(self, program: str, *args: str, timeout: float) -> None:
        # the output goes to a file, not a pipe: pg_ctl leaves a server running, which must not hold our pipe
        with self.commands_log.open("ab") as out:
            result = subprocess.run([str(self._bin / program), *args], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=timeout,
                                    user=self._user.pw_uid if self._user else None,
                                    group=self._user.pw_gid if self._user else None,
                                    extra_groups=[] if self._user else None)
        if result.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed with exit code {result.returncode}:\n"
                               f"{_tail(self.commands_log)}{_tail(self.log)}")


def _pgserver_bin() -> Path:
    # only the binaries of the wheel are used: its own server class listens on a unix socket only
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise RuntimeError("the tests' own PostgreSQL comes from the pgserver package, which is not installed: "
                           f"pip install -e '.[dev]' (or start PostgreSQL on 127.0.0.1:5432, or set {URL_VARIABLE})")
    return Path(spec.origin).parent / "pginstall" / "bin"


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return f"--- {path.name}:\n" + "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


def _local_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def server() -> Iterator[str]:
    """The admin URL of the server the run uses (see the module's docstring), stopping an embedded one after."""
    mode = os.environ.get(MODE_VARIABLE, "")
    if mode not in ("", EMBEDDED):
        pytest.fail(f"{MODE_VARIABLE}={mode!r}: the only value is {EMBEDDED!r} (or unset)", pytrace=False)
    if mode != EMBEDDED:
        if url := os.environ.get(URL_VARIABLE):
            yield url
            return
        if _local_answers():
            yield LOCAL_URL
            return
    try:
        embedded = EmbeddedPostgres()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        try:
            url = embedded.start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"cannot start the tests' own PostgreSQL: {exc}", pytrace=False)
        yield url
    finally:
        embedded.stop()


async def _admin(admin_url: str, statement: str) -> None:
    conn = await asyncpg.connect(admin_url, timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def fresh_database(admin_url: str, prefix: str = "kubus_test") -> Iterator[str]:
    """A new, empty database on the server of `admin_url`, named `<prefix>_<random>`, dropped afterwards; its URL.

    It is synchronous (it runs its own event loop), so call it from a synchronous fixture.
    """
    name = f"{prefix}_{secrets.token_hex(6)}"
    try:
        asyncio.run(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"cannot create a test database on PostgreSQL via {admin_url} ({exc}); fix that server, point "
                    f"{URL_VARIABLE} at another, or set {MODE_VARIABLE}={EMBEDDED} to have the tests start their own",
                    pytrace=False)
    try:
        yield str(sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False))
    finally:
        # FORCE: a test (or a service it killed) may leave a connection the server has not noticed yet
        asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
