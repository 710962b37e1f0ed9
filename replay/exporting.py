"""`kubus events export` and `kubus events import`: a recorded history to a file, and back into a store
and a JetStream stream (for `kubus replay` and `kubus audit` elsewhere).

Export reads the store's input log (reconciler_ticks), decisions and outbox, and KUBUS_EVENTS, and writes
the bundles of `replay.source` in the format of `replay.fileformat`.

Import loads a file into an empty store (ticks, decisions and their actions as sent, results, observed
events) and, unless told not to, into an empty KUBUS_EVENTS with every message at its recorded sequence:
sequences the file does not hold are published as placeholders and deleted, so the stream has the same
gaps and `kubus replay` reads the same sequences the file names. An imported store is for replay and
audit; a reconciler run against it would find no consumer positions and decide everything again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

import msgspec
import sqlalchemy as sa

from kube.times import parse_time
from messages import codec, subjects
from replay import fileformat
from replay.bundles import Bundle
from replay.source import Window, live_bundles
from store import events as event_rows
from store import outbox as outbox_rows
from store import results as result_rows
from store.engine import Store
from store.tables import decisions as decision_table
from store.tables import reconciler_ticks as tick_table

PLACEHOLDER = b"kubus events import: placeholder for a sequence the export did not hold"


class ImportRefused(ValueError):
    """An import refused (the target is not empty, the file is bad): the message says why."""


async def export(store: Store, bus: Any, out: IO[bytes], window: Window, *, decisions: bool = True,
                 source: dict[str, Any] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, int] | None:
    """Writes the history in `window` to `out`; the line counts, None when no tick falls in the window. `progress`
    is told each tick written."""
    found = await live_bundles(store, bus, window, with_decisions=decisions)
    if found is None:
        return None
    bundles, close = found
    writer = fileformat.Writer(out, source or {}, decisions=decisions)
    try:
        async for bundle in bundles:
            writer.bundle(bundle)
            if progress is not None:
                progress(1)
    finally:
        await close()
    writer.close()
    return writer.counts


# --- import ------------------------------------------------------------------------------------------------
async def import_file(path: str, store: Store | None, bus: Any | None,
                      progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Loads the file into `store` and/or `bus`'s KUBUS_EVENTS (both must hold no history yet). `progress` is told
    each tick loaded."""
    if store is not None:
        async with store.engine.connect() as conn:
            if await conn.scalar(sa.select(sa.func.count()).select_from(tick_table)):
                raise ImportRefused(f"{store.label} already holds an input log: import into an empty store")
    stream = None
    if bus is not None:
        stream = bus.stream(subjects.EVENTS_STREAM)
        info = await bus.js.stream_info(stream)
        if info.state.last_seq:
            raise ImportRefused(f"stream {stream} is not empty (its last sequence is {info.state.last_seq}): import "
                               f"under another --prefix")
    _, checking = fileformat.read_file(path)
    for _ in checking:  # the whole file is checked before anything is written
        pass
    _, bundles = fileformat.read_file(path)
    messages: dict[int, tuple[str, bytes]] = {}
    counts = {"ticks": 0, "decisions": 0, "results": 0, "events": 0}
    batch: list[Bundle] = []
    for bundle in bundles:
        for seq, subject, payload in bundle.messages:
            if seq not in messages:
                data = payload if isinstance(payload, bytes) else codec.encode(payload)
                messages[seq] = (subject, data)
        batch.append(bundle)
        if len(batch) >= 200:
            if store is not None:
                await _store(store, batch, counts)
            if progress is not None:
                progress(len(batch))
            batch = []
    if batch and store is not None:
        await _store(store, batch, counts)
    if progress is not None:
        progress(len(batch))
    if store is not None:
        await _fix_sequences(store)
    if bus is not None:
        assert stream is not None
        counts["events"] = await _publish(bus, stream, messages)
    return counts


async def _store(store: Store, bundles: list[Bundle], counts: dict[str, int]) -> None:
    async with store.transaction() as tx:
        conn = tx.conn
        for bundle in bundles:
            tick = bundle.tick
            await conn.execute(sa.insert(tick_table).values(
                id=tick.id, instance=tick.instance, kind=tick.kind, at=tick.at, caught_up=tick.caught_up,
                first_seq=tick.first_seq, last_seq=tick.last_seq, partitions=tick.partitions,
                result_keys=list(tick.result_keys), results=[msgspec.to_builtins(r) for r in bundle.results],
                decision_ids=list(tick.decision_ids), state=tick.state, lease_epoch=tick.lease_epoch))
            counts["ticks"] += 1
            for d in bundle.decisions or ():
                await conn.execute(sa.insert(decision_table).values(
                    id=d.id, correlation_id=d.correlation_id, controller_key=d.controller_key,
                    controller_kind=d.controller_kind, partition=d.partition, stream_seq=d.stream_seq,
                    trigger=d.trigger, decided_at=d.decided_at, duration_ms=0.0, summary=d.summary))
                rows = []
                for action in d.actions:
                    partition = subjects.CLUSTER if d.partition < 0 else str(d.partition)
                    rows.append(outbox_rows.OutboxRow(
                        key=action.key, decision_id=d.id, subject=subjects.action_subject(partition),
                        payload=action.payload, created_at=d.decided_at, targets=_targets(action.payload)))
                if rows:
                    await outbox_rows.enqueue(conn, rows)
                    await outbox_rows.mark_sent(conn, [r.key for r in rows], at=d.decided_at)
                counts["decisions"] += 1
            if bundle.results:
                await result_rows.record(conn, [_result_row(r) for r in bundle.results], at=tick.at)
                counts["results"] += len(bundle.results)
            if tick.kind == "batch":
                await event_rows.record(conn, [_event_row(seq, p) for seq, _, p in bundle.messages
                                               if not isinstance(p, bytes)], at=tick.at)


def _targets(payload: bytes) -> tuple[Any, ...]:
    try:
        from reconciler.core.audit_targets import targets_of

        return tuple(targets_of(codec.decode_action(payload)))
    except (ImportError, codec.BadMessage, codec.NewerSchema):
        return ()


def _result_row(r: Any) -> result_rows.ResultRow:
    return result_rows.ResultRow(
        key=r.key, action_key=r.action_key, decision_id=r.decision_id or None, action=r.action, outcome=r.outcome,
        code=r.code or None, reason=r.reason, message=r.message, object_uid=r.object_uid or None,
        executor=r.executor, attempts=r.attempts, finished_at=parse_time(r.finished_at),
        subject=r.subject or None, resource_version=r.resource_version or None)


def _event_row(seq: int, e: Any) -> event_rows.ObservedEventRow:
    return event_rows.ObservedEventRow(
        stream_seq=seq, msg_id=e.msg_id, kind=e.kind, event_type=e.type, namespace=e.namespace, name=e.name,
        uid=e.uid, resource_version=e.resource_version, observed_at=parse_time(e.observed_at))


async def _fix_sequences(store: Store) -> None:
    """PostgreSQL: ids inserted explicitly do not move the sequences behind them."""
    if store.backend != "postgresql":
        return
    async with store.transaction() as tx:
        for table in ("decisions", "reconciler_ticks"):
            await tx.conn.execute(sa.text(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT COALESCE(MAX(id), 0) + 1 FROM {table}), false)"))


async def _publish(bus: Any, stream: str, messages: dict[int, tuple[str, bytes]]) -> int:
    """Every message at its sequence; placeholders (deleted afterwards) where the file has none."""
    placeholder = f"{bus.prefix}.events.{subjects.CLUSTER}.Placeholder.import"
    gaps: list[int] = []
    pending = []
    top = max(messages, default=0)
    for seq in range(1, top + 1):
        found = messages.get(seq)
        if found is None:
            subject, data = placeholder, PLACEHOLDER
            gaps.append(seq)
        else:  # under this stream's prefix: `<prefix>.events.<partition>.<kind>.<uid>`
            subject, data = f"{bus.prefix}.{found[0].split('.', 1)[1]}", found[1]
        pending.append((seq, await bus.js.publish_async(subject, data)))
        if len(pending) >= 1000:
            await _acked(pending)
            pending = []
    await _acked(pending)
    for seq in gaps:
        await bus.js.delete_msg(stream, seq)
    return len(messages)


async def _acked(pending: list[tuple[int, Any]]) -> None:
    for seq, ack in pending:
        got = (await ack).seq
        if got != seq:
            raise ImportRefused(f"the stream put the message of sequence {seq} at {got}: was it written to meanwhile?")

