"""Recovery: how long a restarted reconciler takes to rebuild its cache of 50,000 objects.

    .venv/bin/python -m bench.reconciler_bench [--objects 50000]

Publishes that many pod events (as ingest would) to an embedded nats-server, waits until the
compacted KUBUS_STATE holds them, then times `Reconciler.bootstrap()` (read KUBUS_STATE, decode
each object into the kube model, fold it into the cache) and, separately, the fold alone.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import msgspec

from bench.loadgen import machine
from kube import codec
from kube.testing import pod
from messages import codec as bus_codec
from messages import subjects
from messages.observed import ADDED, ObservedEvent
from reconciler.consuming import Reconciler
from reconciler.core.cache import Cache
from runtime.bus import Bus, connect, ensure_streams
from runtime.natsserver import EmbeddedNats


def events(count: int) -> list[ObservedEvent]:
    out = []
    for i in range(count):
        ns = f"ns-{i % 50}"
        obj = pod(f"p-{i}").ns(ns).on_node(f"node-{i % 500}").labels(app=f"a{i % 20}").phase("Running").build()
        out.append(ObservedEvent(kind="Pod", type=ADDED, namespace=ns, name=obj.metadata.name, uid=obj.metadata.uid,
                                 resource_version=str(i + 10), observed_at="2026-01-01T00:00:00.000000Z",
                                 ingest="bench", object=msgspec.Raw(codec.encode(obj))))
    return out


async def publish(bus: Bus, evs: list[ObservedEvent]) -> None:
    """The events into KUBUS_EVENTS, as ingest publishes them."""
    pending = []
    for e in evs:
        subject = subjects.event_subject(bus.partition_of(e.namespace), e.kind, e.uid, bus.prefix)
        pending.append(await bus.js.publish_async(subject, bus_codec.encode(e), headers={"Nats-Msg-Id": e.msg_id}))
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def main(count: int) -> None:
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(tmp)
        await server.start()
        nc = await connect(server.url, "bench")
        bus = await ensure_streams(nc, prefix="benchrec", partitions=16)
        evs = events(count)
        start = time.perf_counter()
        await publish(bus, evs)
        published = time.perf_counter() - start
        state = bus.stream(subjects.STATE_STREAM)
        while (await bus.js.stream_info(state)).state.messages < count:
            await asyncio.sleep(0.1)  # the server copies into KUBUS_STATE asynchronously
        reconciler = Reconciler(bus, store=None)
        start = time.perf_counter()
        loaded = (await reconciler.bootstrap()).loaded
        bootstrap = time.perf_counter() - start
        assert loaded == count, (loaded, count)
        cache = Cache()
        start = time.perf_counter()
        for seq, e in enumerate(evs, 1):
            cache.apply(e, seq)
        fold = time.perf_counter() - start
        await nc.close()
        await server.stop()
    print(f"recovery: cache of {count:,} pods rebuilt from KUBUS_STATE in {bootstrap:.2f} s "
          f"({count / bootstrap:,.0f} objects/s); the fold alone {fold:.2f} s ({count / fold:,.0f} events/s); "
          f"publishing them took {published:.2f} s ({count / published:,.0f} events/s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=50_000)
    asyncio.run(main(parser.parse_args().objects))
