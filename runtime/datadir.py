"""The data directory (`--data-dir`): one kubus at a time, and a new simulated cluster's state on its own.

By default a service keeps its state there: the embedded nats-server's streams under `nats/` and the SQLite store
(`kubus.db`, its audit trail). That state is one cluster's history (ingest/identity.py): the streams record the
cluster's identity and refuse another's.

`kubus up --sim` starts a new simulated cluster every time, so whatever state its data directory holds is a
previous cluster's, which no longer exists. It is neither refused (the README's own commands, run twice, would
fail) nor mixed with the new cluster's (two clusters' histories in one stream and one audit trail), nor deleted (its
history is for `kubus audit` and `kubus replay`): `set_aside` moves it, whole, to
`<data-dir>/previous/<UTC time>-<its cluster's uid>/`, which those commands read with `--data-dir`.

`lock` keeps a second kubus off a data directory whose embedded nats-server one is running (two nats-servers on
one store corrupt it, and moving state aside from under a running kubus would lose what it writes next).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from messages import subjects
from runtime.bus import connect
from runtime.natsserver import EmbeddedNats

log = logging.getLogger("kubus")

NATS_DIR = "nats"  # the embedded nats-server's store, config and log
PREVIOUS_DIR = "previous"
LOCK_FILE = "kubus.lock"
UNKNOWN = "unknown-cluster"


class DataDirBusy(RuntimeError):
    """Another kubus process runs on the data directory."""


@contextlib.contextmanager
def lock(data_dir: Path) -> Iterator[None]:
    """Holds `<data-dir>/kubus.lock` (an advisory lock the kernel drops when the process dies, even by SIGKILL);
    raises DataDirBusy when another process holds it."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise DataDirBusy(f"another kubus (pid {holder}) is running on data directory {data_dir}, its embedded "
                              "nats-server's streams and its database: stop it, or give this one another "
                              "--data-dir (or KUBUS_DATA_DIR)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


async def recorded_cluster(data_dir: Path, prefix: str) -> str | None:
    """The uid of the cluster whose streams the embedded nats-server's store in `data_dir` holds (the record ingest
    keeps on `<prefix>.cluster`), or None when there is none to read."""
    store = data_dir / NATS_DIR
    if not (store / "jetstream").is_dir():
        return None
    server = EmbeddedNats(store)
    try:
        await server.start()
        nc = await connect(server.url, "kubus-data-dir", reconnect=False, timeout=10)
        try:
            msg = await nc.jetstream().get_last_msg(subjects.stream_name(subjects.STATE_STREAM, prefix),
                                                    subjects.cluster_subject(prefix))
            uid = json.loads(msg.data or b"{}").get("uid")
        finally:
            await nc.close()
    except Exception as exc:  # no stream or record, an unreadable one, a store nats refuses: set aside anyway
        log.debug("no cluster record read in %s: %s", store, exc)
        return None
    finally:
        await server.stop()
    return str(uid) if uid else None


async def set_aside(data_dir: Path, entries: Sequence[str], prefix: str, now: datetime | None = None) -> Path | None:
    """Moves the `entries` of `data_dir` that exist (NATS_DIR, the SQLite files) to
    `<data-dir>/previous/<time>-<cluster uid>/` and says so in one log line; returns that directory, or None when
    there was nothing to move."""
    present = [name for name in entries if (data_dir / name).exists()]
    if not present:
        return None
    uid = await recorded_cluster(data_dir, prefix) if NATS_DIR in present else None
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    target = data_dir / PREVIOUS_DIR / f"{stamp}-{uid or UNKNOWN}"
    suffix = 1
    while target.exists():  # two starts within a second
        suffix += 1
        target = data_dir / PREVIOUS_DIR / f"{stamp}-{uid or UNKNOWN}-{suffix}"
    target.mkdir(mode=0o700, parents=True)
    for name in present:
        os.replace(data_dir / name, target / name)
    whose = f"cluster {uid}'s" if uid else "an earlier cluster's"
    log.warning("the state in %s was %s, a simulated cluster that is gone: moved aside to %s (read it with kubus "
                "audit or kubus replay --data-dir %s); starting afresh", data_dir, whose, target, target)
    return target
