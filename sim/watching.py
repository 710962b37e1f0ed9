"""Watch streams: newline-delimited `{"type":..., "object":...}` frames over a chunked response.

Semantics follow kube-apiserver's watch cache: no resourceVersion (or "0") starts with synthetic
ADDED events for the current objects; a resourceVersion resumes after it, or answers with an
ERROR frame carrying a 410 Expired Status when the history no longer holds it; a MODIFIED event
that moves an object into or out of a selector becomes ADDED or DELETED; bookmarks are sent
when asked; `timeoutSeconds` ends the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from sim import status as errors
from sim.resources import ApiResource
from sim.selection import Filter
from sim.store import ADDED, DELETED, MODIFIED, Expired, ObjectStore

_encode = msgspec.json.encode

Framer = Callable[[str, dict[str, Any], bytes], bytes]


def json_frame(event_type: str, obj: dict[str, Any], raw: bytes) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}\n"


def error_frame(error: errors.ApiError) -> bytes:
    return _encode({"type": "ERROR", "object": error.status()}) + b"\n"


def bookmark_frame(resource: ApiResource, rv: int, initial_events_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}
    return _encode({"type": "BOOKMARK", "object": obj}) + b"\n"


class WatchRequest:
    def __init__(self, resource: ApiResource, flt: Filter, resource_version: str | None,
                 timeout: float | None, bookmarks: bool, send_initial_events: bool | None,
                 bookmark_interval: float):
        self.resource = resource
        self.filter = flt
        self.resource_version = resource_version
        self.timeout = timeout
        self.bookmarks = bookmarks
        self.send_initial_events = send_initial_events
        self.bookmark_interval = bookmark_interval


def _initial(store: ObjectStore, req: WatchRequest) -> tuple[list[tuple[str, dict[str, Any], bytes]], int] | None:
    """The synthetic ADDED events a watch starts with, and the rv they represent; None to resume."""
    rv = req.resource_version
    wants_initial = req.send_initial_events if req.send_initial_events is not None else rv in (None, "", "0")
    if not wants_initial:
        return None
    flt = req.filter
    entries = store.iter(req.resource, flt.namespace)
    frames = [(ADDED, e.obj, e.raw) for e in entries if flt.trivial or flt.matches(e.obj)]
    return frames, store.rv


def translate(event_type: str, new: dict[str, Any], old: dict[str, Any] | None, flt: Filter) -> str | None:
    """The event a filtered watcher sees, as the watch cache computes it."""
    if flt.trivial and flt.namespace is None:
        return event_type
    if event_type != MODIFIED:
        return event_type if flt.matches(new) else None
    now_in = flt.matches(new)
    was_in = old is not None and flt.matches(old)
    if now_in and was_in:
        return MODIFIED
    if now_in:
        return ADDED
    if was_in:
        return DELETED
    return None


async def serve_watch(request: web.Request, store: ObjectStore, req: WatchRequest, framer: Framer,
                      stopping: asyncio.Event) -> web.StreamResponse:
    if req.resource_version not in (None, "", "0"):
        try:
            start_rv = int(req.resource_version or "0")
        except ValueError:
            raise errors.bad_request(f"invalid resource version: {req.resource_version}") from None
    else:
        start_rv = store.rv
    response = web.StreamResponse(headers={"Content-Type": "application/json",
                                           "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.timeout if req.timeout else None
    initial = _initial(store, req)
    if initial is not None:
        frames, start_rv = initial
        chunk = b"".join(framer(t, o, raw) for t, o, raw in frames)
        if req.bookmarks and req.send_initial_events:
            chunk += bookmark_frame(req.resource, start_rv, initial_events_end=True)
        if chunk:
            await response.write(chunk)
    cursor = start_rv
    next_bookmark = loop.time() + req.bookmark_interval
    ns = req.filter.namespace
    stop = asyncio.ensure_future(stopping.wait())  # one task for the watch's life, not one per wake
    try:
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            while not stopping.is_set():
                try:
                    events = store.events_since(cursor)
                except Expired:
                    await response.write(error_frame(errors.gone(
                        f"too old resource version: {cursor} ({store.oldest_rv + 1})")))
                    break
                out = []
                for ev in events:
                    if ev.resource is not req.resource or (ns is not None and ev.namespace != ns):
                        continue
                    shown = translate(ev.type, ev.entry.obj, ev.old, req.filter)
                    if shown is not None:
                        out.append(framer(shown, ev.entry.obj, ev.entry.raw))
                if events:
                    cursor = events[-1].rv
                now = loop.time()
                if req.bookmarks and now >= next_bookmark:
                    out.append(bookmark_frame(req.resource, cursor))
                    next_bookmark = now + req.bookmark_interval
                if out:
                    await response.write(b"".join(out))
                wait_for = next_bookmark - now if req.bookmarks else None
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        break
                    wait_for = left if wait_for is None else min(wait_for, left)
                await _wait(store, cursor, stop, wait_for)
    finally:
        stop.cancel()
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


async def _wait(store: ObjectStore, cursor: int, stop: asyncio.Future[Any], timeout: float | None) -> None:
    """Returns once the store holds a write past `cursor`, the server stops, or `timeout` seconds passed."""
    if store.rv > cursor or stop.done():
        await asyncio.sleep(0)  # as a wait does: the loop runs once before the watch reads the store again
        return
    woken = store.next_write()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    stop.add_done_callback(wake)
    timer = asyncio.get_running_loop().call_later(timeout, wake) if timeout is not None else None
    try:
        await woken
    finally:
        stop.remove_done_callback(wake)
        if timer is not None:
            timer.cancel()
