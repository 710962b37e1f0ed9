"""A cancellation that is never lost: Python 3.11's `asyncio.wait_for` drops one that arrives together with the
answer it waits for (CPython gh-86296, fixed in 3.12). The cancelled task is handed the answer and goes on, and a
task that loops (every service's) then never ends: whatever waits for it waits for ever. nats-py awaits every
request's reply with `asyncio.wait_for`, so any NATS call can lose a stop: ingest's checkpoint loop did, and held
`Ingest.run`'s TaskGroup, and with it a CI run, for good.

`install()` puts 3.12's `wait_for` in its place for the whole process (as asyncpg does for itself in its
`_asyncio_compat`): the wait runs in the caller's task under `asyncio.timeout`, so a cancellation is thrown into it
like any other. It is installed when `runtime` is first imported, before any service code runs.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

_STOCK_WAIT_FOR = asyncio.wait_for


async def wait_for(awaitable: Awaitable[T], timeout: float | None) -> T:
    """`asyncio.wait_for` as Python 3.12 has it: the result, or TimeoutError after `timeout` seconds (the awaitable
    cancelled); a cancellation of the caller always propagates."""
    if timeout is not None and timeout <= 0:  # no time at all: only what is done already
        future = asyncio.ensure_future(awaitable)
        if future.done():
            return future.result()
        await _cancel_and_wait(future)
        try:
            return future.result()
        except asyncio.CancelledError as exc:
            raise TimeoutError from exc
    async with asyncio.timeout(timeout):
        return await awaitable


async def _cancel_and_wait(future: asyncio.Future[Any]) -> None:
    waiter = asyncio.get_running_loop().create_future()
    release = functools.partial(_release, waiter)
    future.add_done_callback(release)
    try:
        future.cancel()
        await waiter  # not the future itself: this wait stays cancellable
    finally:
        future.remove_done_callback(release)


def _release(waiter: asyncio.Future[None], *_: object) -> None:
    if not waiter.done():
        waiter.set_result(None)


def install() -> None:
    """Replaces `asyncio.wait_for` with `wait_for` on Pythons that lose cancellations (idempotent)."""
    if sys.version_info < (3, 12):
        asyncio.wait_for = wait_for  # type: ignore[assignment]
        asyncio.tasks.wait_for = wait_for  # type: ignore[assignment]


def stock_wait_for() -> Any:
    """The interpreter's own `asyncio.wait_for`, for the test that shows why it is replaced."""
    return _STOCK_WAIT_FOR
