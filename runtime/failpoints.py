"""Failpoints: crash this process at a named point, for the crash-recovery tests.

`KUBUS_FAILPOINT=reconciler.after-commit` makes the process kill itself with SIGKILL (as
`kill -9` would) the first time it reaches that point, so a test can check that a restart loses
and duplicates nothing. Unset, a failpoint costs one dictionary lookup.

Points: `reconciler.after-commit` (decisions committed, actions not yet published),
`relay.after-publish` (actions published, outbox rows not yet marked sent),
`executor.after-apply` (the API call made, the action not yet acknowledged),
`ingest.after-publish` (events published, the checkpoint not yet saved).
"""

from __future__ import annotations

import os
import signal

_ARMED = {p for p in os.environ.get("KUBUS_FAILPOINT", "").split(",") if p}


def hit(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
