"""Failpoints: crash or pause this process at a named point, for the crash-recovery tests.

`KUBUS_FAILPOINT=reconciler.after-commit` makes the process kill itself with SIGKILL (as
`kill -9` would) the first time it reaches that point, so a test can check that a restart loses
and duplicates nothing. `KUBUS_FAILPOINT=reconciler.before-commit=pause:/some/file` pauses instead:
the first time the point is reached the process creates the file and waits, without blocking its
event loop, until the test deletes it (to restart a database under an open transaction, say).
Several are separated by commas. Unset, a failpoint costs one dictionary lookup.

Points: `reconciler.after-commit` (decisions committed, actions not yet published),
`reconciler.before-commit` (a batch with decisions written in its transaction, the COMMIT not sent yet),
`relay.after-publish` (actions published, outbox rows not yet marked sent),
`executor.after-apply` (the API call made, the action not yet acknowledged),
`ingest.after-publish` (events published, the checkpoint not yet saved).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

KILL = "kill"
PAUSE = "pause:"
PAUSE_POLL = 0.05  # seconds between two looks at a pause's file


def _parse(spec: str) -> dict[str, str]:
    armed: dict[str, str] = {}
    for item in spec.split(","):
        name, _, action = item.partition("=")
        if name:
            armed[name] = action or KILL
    return armed


_ARMED = _parse(os.environ.get("KUBUS_FAILPOINT", ""))


def hit(name: str) -> None:
    """Dies here if `name` is armed to kill."""
    if _ARMED.get(name) == KILL:
        os.kill(os.getpid(), signal.SIGKILL)


async def reached(name: str) -> None:
    """Dies here if `name` is armed to kill; pauses here, once, if it is armed to pause."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == KILL:
        hit(name)
        return
    if action.startswith(PAUSE):
        del _ARMED[name]  # once
        marker = Path(action.removeprefix(PAUSE))
        marker.touch()
        while marker.exists():
            await asyncio.sleep(PAUSE_POLL)  # the test's signal to go on is the file's removal
