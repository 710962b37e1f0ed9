"""A shadow reconciler's comparator task: counts the divergences of each comparison window that closed
(`kubus_shadow_divergences_total{controller,kind}`, docs/shadow.md). The report (`kubus shadow report`) reads
the same acts and runs the same pure comparison (reconciler.core.comparing)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from kube.times import Clock, utcnow
from reconciler.core.comparing import KUBUS_ONLY, UPSTREAM_ONLY, Timed, Window, compare
from runtime import serving
from store.engine import Store

log = logging.getLogger("kubus.shadow")


def timed(rows: list) -> list[Timed]:  # type: ignore[type-arg]
    """The store's rows (store.shadow.ShadowActRow) as the comparator takes them."""
    return [Timed(row.act, row.at, row.id) for row in rows]


async def count_divergences(store: Store, window: timedelta, clock: Clock = utcnow,
                            stop: asyncio.Event | None = None) -> None:
    """Every half window (at least every second), compares the windows that closed since the process started
    and counts each one's divergences once."""
    stop = stop or asyncio.Event()
    started = clock()
    counted: set[tuple[str, str, datetime]] = set()
    interval = max(window.total_seconds() / 2, 1.0)
    while not stop.is_set():
        try:
            now = clock()
            rows = await store.shadow_acts(since=started - window)
            for judged in compare(timed(rows), window, now):
                _count(judged, counted)
        except Exception as exc:  # the database away: the next round tries again
            log.warning("shadow comparison paused: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


def _count(judged: Window, counted: set[tuple[str, str, datetime]]) -> None:
    mark = (judged.controller_key, judged.owner_uid, judged.start)
    if mark in counted or not judged.diverges:
        return
    counted.add(mark)
    for kind, acts in ((KUBUS_ONLY, judged.kubus_only), (UPSTREAM_ONLY, judged.upstream_only)):
        if acts:
            serving.SHADOW_DIVERGENCES.labels(controller=judged.controller_kind, kind=kind).inc(len(acts))
            log.warning("shadow divergence: %s %s: %s", judged.controller_key, kind,
                        ", ".join(f"{t.act.verb} {t.act.target}".strip() for t in acts))
