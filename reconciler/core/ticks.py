"""The reconciler's input log as values: what a starting process loaded, and what each committed batch fed
the controllers. The store keeps them (table `reconciler_ticks`, store/ticks.py); a replay reads them back.

Two kinds of tick, per reconciler instance:

- ``start``: a process started. ``first_seq`` is where its replay of KUBUS_EVENTS began, ``last_seq``
  the newest event its cache was bootstrapped with from KUBUS_STATE, and ``state`` what it loaded from
  the store: ``{"positions": {partition: seq}, "expectations": {key: {...}}, "backoff": {key: {...}}}``
  (see :func:`state_of`), with what else its decisions depend on (partition count, settings, the positions
  its first commit records). Recorded with the instance's first commit.
- ``batch``: one committed batch. ``at`` is the clock given to the controllers, ``caught_up`` the loop's
  flag as the batch began, ``first_seq``/``last_seq`` the stream range of its messages (all partitions,
  skipped ones included), ``results`` the executor results fed to the controllers (``result_keys``
  their keys), in order, and ``decision_ids`` the decisions committed with it, in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

START = "start"
BATCH = "batch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    instance: str
    kind: str  # START | BATCH
    at: datetime
    caught_up: bool
    first_seq: int | None = None
    last_seq: int | None = None
    partitions: list[int] | None = None  # None: every partition
    result_keys: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)  # messages.actions.ActionResult as builtins
    decision_ids: list[int] = field(default_factory=list)
    state: dict[str, Any] | None = None  # START only: see state_of
    lease_epoch: int | None = None
    id: int | None = None


def state_of(positions: Mapping[int, int], expectations: Mapping[str, Any], backoff: Mapping[str, Any]
             ) -> dict[str, Any]:
    """A start tick's ``state``: the store's positions, expectations and backoff rows as JSON.

    ``expectations`` values have adds, dels, deletion_keys and set_at (store.expectations.ExpectationsRow or
    reconciler.core.expectations.Expectations); ``backoff`` values delay_seconds and last_update."""
    return {
        "positions": {str(p): int(s) for p, s in sorted(positions.items())},
        "expectations": {k: {"adds": e.adds, "dels": e.dels, "deletion_keys": sorted(e.deletion_keys),
                             "set_at": None if e.set_at is None else e.set_at.isoformat()}
                         for k, e in sorted(expectations.items())},
        "backoff": {k: {"delay_seconds": b.delay_seconds, "last_update": b.last_update.isoformat()}
                    for k, b in sorted(backoff.items())},
    }
