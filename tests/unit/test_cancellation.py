"""runtime/cancellation.py: a task asked to stop stops, even when the answer it waits for arrives in the same
loop iteration (Python 3.11's wait_for hands it the answer and drops the cancellation)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from runtime import cancellation


async def _cancel_as_the_answer_arrives(wait_for: Callable[..., Any]) -> asyncio.Task[str]:
    """A loop that waits for an answer with `wait_for`, then sleeps until the next round (as ingest's checkpoint
    loop does), cancelled in the very iteration its answer arrives."""
    answer = asyncio.get_running_loop().create_future()

    async def loop_forever() -> str:
        await wait_for(answer, 10)
        await asyncio.sleep(3600)
        return "went on"

    task = asyncio.create_task(loop_forever())
    await asyncio.sleep(0)  # the task now waits inside wait_for
    answer.set_result("reply")
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1)
    if not done:
        task.cancel()  # the lost cancellation, asked again so the test ends
        await asyncio.wait({task})
        return task
    return task


async def test_the_stock_wait_for_of_this_python_loses_the_cancellation() -> None:
    """Why the fix exists: on 3.11 the task is still running a second after it was cancelled."""
    import sys
    if sys.version_info >= (3, 12):
        pytest.fail("Python 3.12 fixed wait_for: runtime/cancellation.py and this test can go")
    task = await _cancel_as_the_answer_arrives(cancellation.stock_wait_for())
    assert task.cancelled()
    assert task.cancelling() == 2, "cancelled only by the second request: the first was lost"


async def test_the_installed_wait_for_never_loses_a_cancellation() -> None:
    assert asyncio.wait_for is cancellation.wait_for, "importing runtime installs it"
    task = await _cancel_as_the_answer_arrives(asyncio.wait_for)
    assert task.cancelled()
    assert task.cancelling() == 1, "the first cancellation ended it"


async def test_wait_for_returns_the_answer_or_times_out_as_before() -> None:
    async def answer(after: float) -> str:
        await asyncio.sleep(after)
        return "done"

    assert await cancellation.wait_for(answer(0), 1) == "done"
    assert await cancellation.wait_for(answer(0), None) == "done"
    with pytest.raises(TimeoutError):
        await cancellation.wait_for(answer(10), 0.01)
    slow = asyncio.ensure_future(answer(10))
    with pytest.raises(TimeoutError):
        await cancellation.wait_for(slow, 0)
    assert slow.cancelled(), "a timed-out wait cancels what it waited for"
    ready = asyncio.get_running_loop().create_future()
    ready.set_result("ready")
    assert await cancellation.wait_for(ready, 0) == "ready"


async def test_a_bounded_wait_in_a_stopping_task_still_times_out() -> None:
    """A service's shutdown (a finally after its cancellation) waits for its last acks with a timeout: the timeout
    is still a TimeoutError there, not a second cancellation that skips the rest of the shutdown."""
    steps: list[str] = []

    async def service() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            try:
                await cancellation.wait_for(asyncio.sleep(3600), 0.01)
            except TimeoutError:
                steps.append("timed out")
            steps.append("saved")

    task = asyncio.create_task(service())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps == ["timed out", "saved"]
