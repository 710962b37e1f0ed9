"""The reconciler's intake: the events its KUBUS_EVENTS subscription delivered and its loop has not taken yet.

The loop takes them in batches (reconciler.consuming `_next_batch`), so what a delivery costs is what matters
most: nats-py calls the subscription's callback once per message, and an asyncio.Queue's `put` coroutine,
`put_nowait` and `get_nowait` around each message cost more than the deque and the flag here (a delivery is an
append and an Event that is set already; a batch is taken in one pass). The loop's wakeups without an event (a
kick: results to record, a requeue due) set the same flag.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from nats.aio.msg import Msg


class Intake:
    def __init__(self) -> None:
        self._msgs: collections.deque[Msg] = collections.deque()
        # set when a message arrived or a kick came since the loop last waited; kept set while messages remain
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._msgs)

    async def deliver(self, msg: Msg) -> None:
        """The subscription's callback: one message, in the stream's order."""
        self._msgs.append(msg)
        self._ready.set()

    def kick(self) -> None:
        """Wakes a wait without a message."""
        self._ready.set()

    async def wait(self, timeout: float) -> bool:
        """Until a message is there or a kick came (True; the kick is taken), or `timeout` seconds passed
        (False). A timeout of 0 takes a kick, if one came, without waiting."""
        if not self._ready.is_set() and timeout > 0:
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return False
        ready = self._ready.is_set()
        self._ready.clear()
        if self._msgs:
            self._ready.set()
        return ready

    def take(self, into: list[Msg], limit: int, until: Callable[[Msg], bool] | None = None) -> bool:
        """Moves the oldest messages into `into` until it holds `limit` or none are left; with `until`, stops
        after the first message it is true of, and says whether one was."""
        msgs = self._msgs
        met = False
        for _ in range(min(limit - len(into), len(msgs))):
            msg = msgs.popleft()
            into.append(msg)
            if until is not None and until(msg):
                met = True
                break
        if not msgs:
            self._ready.clear()
        return met

    async def gather(self, into: list[Msg], limit: int, window: float,
                     until: Callable[[Msg], bool] | None = None) -> None:
        """Takes what arrives in the next `window` seconds too, until `into` holds `limit`, or (with `until`)
        up to the first message `until` is true of."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window
        if self.take(into, limit, until):
            return
        while len(into) < limit:
            remaining = deadline - loop.time()
            if remaining <= 0 or not await self.wait(remaining):
                return
            if self.take(into, limit, until):
                return
