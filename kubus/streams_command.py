"""`kubus streams ensure`: create kubus's JetStream streams (and check those that exist), then exit.

Every service also does this at start, so a NATS that lets the services create streams needs nothing
more. On a NATS where each service has a least-privilege user (docs/nats-permissions.conf), only the admin
user may create or change streams: run this once as that user, before the services (beside `kubus db
upgrade`, in the migrate step), and again after an upgrade that changes the streams.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from runtime import flags, logs


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "streams", help="create kubus's JetStream streams as the NATS admin user", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ensure = actions.add_parser("ensure", help="create the streams that are missing, check the others, and exit")
    g = ensure.add_argument_group("bus")
    flags.add_bus(g, without="an error: there is no NATS to create the streams in")
    flags.add_partitions(g)
    flags.add_streams(g)
    logs.add_arguments(ensure)
    ensure.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from runtime.bus import NatsUnavailable, StreamError

    logs.configure(args.log_level, args.log_format)
    if not args.nats_url:
        print("kubus streams ensure: no --nats-url (or KUBUS_NATS_URL): which NATS should hold the streams?",
              file=sys.stderr)
        return 2
    try:
        names = asyncio.run(_ensure(args))
    except (NatsUnavailable, StreamError) as exc:
        print(f"kubus streams ensure: {exc}", file=sys.stderr)
        return 2
    print("\n".join(names))
    return 0


async def _ensure(args: argparse.Namespace) -> list[str]:
    from runtime.bus import close, connect, ensure_streams

    nc = await connect(args.nats_url, "kubus-streams", reconnect=False, timeout=30, auth=flags.nats_auth(args))
    try:
        bus = await ensure_streams(nc, prefix=args.prefix, partitions=args.partitions,
                                   settings=flags.stream_settings(args))
        return bus.streams()
    finally:
        await close(nc)
