"""A test phase (setup, call or teardown) that hangs fails at a deadline instead of holding the run until CI's own
limit kills it with nothing to read: the failure carries every thread's stack and every asyncio task's, which is
what says where an asyncio test is stuck (the loop itself only ever shows `select`).

The deadline is generous on purpose: it catches hangs, it does not time tests. `@pytest.mark.hang_limit(seconds)`
raises it for a test that legitimately runs longer (`hang_limit(setup=seconds)`: for its setup only);
KUBUS_TEST_HANG_LIMIT sets the default.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import os
import signal
import sys
import threading
from collections.abc import Generator
from types import FrameType

import pytest

DEFAULT_LIMIT = float(os.environ.get("KUBUS_TEST_HANG_LIMIT", "300"))  # lower it to hunt a hang faster


class Hung(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """Raised in the main thread when a phase outlives its limit."""


def _await_chain(awaitable: object, out: io.StringIO) -> None:
    """Each frame a suspended task is waiting in, outermost first (a task's own stack shows only its outermost)."""
    depth = 0
    while awaitable is not None and depth < 50:
        frame = next((getattr(awaitable, a) for a in ("cr_frame", "gi_frame", "ag_frame")
                      if getattr(awaitable, a, None) is not None), None)
        if frame is None:
            out.write(f"    awaiting {awaitable!r}\n")
            return
        out.write(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno}, in {frame.f_code.co_name}\n')
        awaitable = next((getattr(awaitable, a) for a in ("cr_await", "gi_yieldfrom", "ag_await")
                          if getattr(awaitable, a, None) is not None), None)
        depth += 1


def _stacks() -> str:
    out = io.StringIO()
    loop = asyncio._get_running_loop()  # the signal handler runs on the main thread, inside the test's loop
    if loop is not None:
        for task in asyncio.all_tasks(loop):
            out.write(f"--- {task.get_name()}:\n")
            _await_chain(task.get_coro(), out)
    return out.getvalue()


def _limit(item: pytest.Item, phase: str) -> float:
    """`hang_limit(seconds)` for every phase, `hang_limit(setup=seconds)` for the setup alone (a session fixture
    that starts something slow, e.g. the real control plane, runs in the setup of the first test that asks)."""
    marker = item.get_closest_marker("hang_limit")
    if marker is None:
        return DEFAULT_LIMIT
    if phase == "setup" and "setup" in marker.kwargs:
        return float(marker.kwargs["setup"])
    return float(marker.args[0]) if marker.args else DEFAULT_LIMIT


def _guarded(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    limit = _limit(item, phase)

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        sys.stderr.write(f"\n=== {item.nodeid}: {phase} hung for {limit:.0f}s; every thread:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        tasks = _stacks()
        sys.stderr.write(f"=== every asyncio task:\n{tasks}\n")
        raise Hung(f"{phase} of {item.nodeid} hung for {limit:.0f}s (every thread's and task's stack above)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded(item, "teardown")
