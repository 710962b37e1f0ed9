"""`kubus replay`, `kubus events export` and `kubus events import` (docs/replay.md).

`kubus replay` re-runs the controllers over a recorded history, deterministically and without touching a
cluster: from a file (`--from-file`) or from the store's input log with the events in JetStream (the
pipeline's `--nats-url`, `--prefix`, `--db-url`, `--data-dir`). Exit codes: 0 done (no divergence), 2 bad input or
an unreachable store or NATS, 3 `--diff` found a divergence (runtime/exitcodes.py: one meaning per code).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from messages import subjects
from runtime import exitcodes, flags
from runtime.progress import Progress

EXIT_BAD_INPUT = exitcodes.NOT_STARTED  # and exitcodes.NO: --diff found a divergence (Replay.finish)


def add_parsers(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "replay", help="re-run the controllers over a recorded history (no cluster touched)",
        description="Re-run the DaemonSet and ReplicaSet controllers over a recorded event history, with the "
                    "clock and the executor results the live reconciler had, and print their decisions: from an "
                    "exported file, or from the store's input log and KUBUS_EVENTS.",
        epilog="Exit status: 0 done, 2 bad input or source unavailable, 3 --diff found a divergence.")
    src = p.add_argument_group("source")
    src.add_argument("--from-file", metavar="FILE", help="a file `kubus events export` wrote ('-': stdin)")
    _source_arguments(src)
    _window_arguments(p)
    what = p.add_argument_group("what to show")
    what.add_argument("--controller", metavar="NAMESPACE/NAME",
                      help="one DaemonSet or ReplicaSet (DaemonSet/NAMESPACE/NAME when both kinds have the name)")
    what.add_argument("--explain", action="store_true",
                      help="per sync, the inputs that mattered and why (per node for a DaemonSet; the diff and "
                           "the deletion ranking for a ReplicaSet)")
    what.add_argument("--diff", action="store_true",
                      help="compare with the recorded decisions and report the first divergence (exit 1)")
    what.add_argument("--decisions", action="store_true", help="print every decision, not only --controller's")
    what.add_argument("-o", "--output", choices=("json", "yaml", "wide"), metavar="json|yaml|wide", default=None,
                      help="json: one JSON object a line; yaml: one YAML document each; wide: the text (default)")
    what.add_argument("--format", dest="output", choices=("text", "json"), help=argparse.SUPPRESS)  # the earlier -o
    whatif = p.add_argument_group("what if (changes applied to the history's events)")
    whatif.add_argument("--set", dest="sets", action="append", default=[], metavar="[OBJECT:]PATH=VALUE",
                        help="e.g. spec.updateStrategy.rollingUpdate.maxUnavailable=3 (the --controller object), "
                             "Node/node-2:spec.taints='[{key: x, effect: NoSchedule}]'; repeatable")
    whatif.add_argument("--spec", metavar="FILE", help="a YAML manifest (or spec) replacing --controller's spec")
    whatif.add_argument("--drop", action="append", default=[], metavar="KIND/[NAMESPACE/]NAME",
                        help="an object that never existed, e.g. Node/node-3; repeatable")
    whatif.add_argument("--add-node", action="append", default=[], metavar="NAME[:LABEL=VALUE,...]",
                        help="a Ready node there from the start; repeatable")
    p.set_defaults(run=run_replay)

    events = sub.add_parser("events", help="export or import a recorded history",
                            description="Export the recorded history (the reconciler's input log, its events and "
                                        "decisions) to a file, or import such a file.")
    commands = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    exp = commands.add_parser("export", help="write the history to a line-delimited JSON file",
                              description="Write the reconciler's input log, the events it consumed and its "
                                          "decisions as line-delimited JSON (docs/replay.md).")
    exp.add_argument("--output-file", "-f", dest="output", default="-", metavar="FILE",
                     help="where to write ('-': stdout)")
    exp.add_argument("--output", "-o", dest="output", help=argparse.SUPPRESS)  # the earlier spelling of -f
    exp.add_argument("--no-decisions", action="store_true", help="leave the decisions out (no --diff from the file)")
    _source_arguments(exp.add_argument_group("source"))
    _window_arguments(exp)
    exp.set_defaults(run=run_export)
    imp = commands.add_parser("import", help="load an exported file into a store and a JetStream stream",
                              description="Load an exported file into an empty store and an empty KUBUS_EVENTS "
                                          "(under --prefix), so that `kubus replay` and `kubus audit` work there.")
    imp.add_argument("file", help="the exported file")
    imp.add_argument("--no-stream", action="store_true", help="load the store only")
    imp.add_argument("--no-store", action="store_true", help="load the stream only")
    target = imp.add_argument_group("target")
    _source_arguments(target)
    flags.add_partitions(target)
    flags.add_streams(target)
    imp.set_defaults(run=run_import)


def _source_arguments(g: Any) -> None:
    """Where the history is: the bus holding KUBUS_EVENTS and the store."""
    flags.add_bus(g, without="an embedded nats-server on the data directory (stop `kubus up` first)")
    flags.add_database(g)


def _window_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("window (bounds included; the replay starts early enough to have the state right)")
    g.add_argument("--since-seq", type=int, metavar="SEQ", help="from the ticks that consumed event SEQ on")
    g.add_argument("--until-seq", type=int, metavar="SEQ", help="up to the tick that consumed event SEQ")
    g.add_argument("--since", metavar="WHEN",
                   help="from this time on: a duration ago (90s, 30m, 1h, 2d) or an RFC 3339 time "
                        "(2026-11-23T05:12:03Z)")
    g.add_argument("--until", metavar="WHEN", help="up to this time, same forms")
    g.add_argument("--instance", metavar="NAME",
                   help="only this reconciler's ticks (a split deployment: each member is replayed on its own)")


class Refused(Exception):
    """Bad input or an unavailable source: printed in one line, exit 2."""


def _window(args: argparse.Namespace) -> Any:
    from replay.report import parse_when
    from replay.source import Window

    now = datetime.now(UTC)  # one `now` for both bounds
    try:
        return Window(args.since_seq, args.until_seq, parse_when(args.since, now) if args.since else None,
                      parse_when(args.until, now) if args.until else None, args.instance)
    except ValueError as exc:
        raise Refused(str(exc)) from None


def _fail(command: str, message: str) -> int:
    print(f"kubus {command}: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


# --- kubus replay ---------------------------------------------------------------------------------------
def run_replay(args: argparse.Namespace) -> int:
    from replay.engine import ReplayError
    from replay.fileformat import FormatError
    from replay.report import Replay, ReplayOptions
    from replay.source import SourceError
    from replay.whatif import WhatIf, WhatIfError, load_spec, parse_add_node, parse_set, parse_target

    try:
        window = _window(args)
        controller = parse_target(args.controller) if args.controller else None
        what_if = WhatIf()
        for text in args.sets:
            what_if.sets.append(parse_set(text, controller))
        if args.spec:
            target, spec = load_spec(args.spec, controller)
            what_if.specs[target] = spec
        what_if.drops.extend(parse_target(t) for t in args.drop)
        what_if.add_nodes.extend(parse_add_node(t) for t in args.add_node)
    except (WhatIfError, Refused) as exc:
        return _fail("replay", str(exc))
    replay = Replay(ReplayOptions(controller=controller, explain=args.explain, diff=args.diff, decisions=args.decisions,
                            window=window, what_if=what_if if what_if else None,
                                  format=args.output if args.output in ("json", "yaml") else "text"), sys.stdout)
    from replay.engine import tuned_gc

    try:
        with tuned_gc(), Progress("kubus replay", "ticks") as progress:
            if args.from_file:
                source = args.from_file
                _replay_file(replay, args.from_file, args.instance, progress)
            else:
                source = asyncio.run(_replay_live(replay, args, progress))
    except FormatError as exc:
        return _fail("replay", f"{args.from_file}: {exc}")
    except (ReplayError, SourceError, WhatIfError, Refused) as exc:
        return _fail("replay", str(exc))
    except BrokenPipeError:  # `kubus replay ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        return _fail("replay", str(exc))
    return replay.finish(source)


def _replay_file(replay: Any, path: str, instance: str | None, progress: Progress) -> None:
    from replay.fileformat import Reader, read_file
    from replay.source import of_instance

    if path != "-" and instance is None and replay.plain_diff:
        from replay import parallel

        with open(path, "rb") as handle:
            header = Reader(handle).read_header()
        if header.decisions:  # (without them there is nothing to compare: the summary says so)
            outcome = parallel.replay_diff(path)
            replay.engine.stats, replay.engine.divergence = outcome.stats, outcome.divergence
            progress.update(outcome.stats.ticks)
            return
    if path == "-":
        reader = Reader(sys.stdin.buffer)
        reader.read_header()
        bundles = iter(reader)
    else:
        _, bundles = read_file(path)
    if instance is not None:  # one member of a split deployment, from a file holding several
        bundles = of_instance(bundles, instance, "stdin" if path == "-" else path)
    for bundle in bundles:
        if not replay.feed(bundle):
            break
        progress.update(1)


async def _replay_live(replay: Any, args: argparse.Namespace, progress: Progress) -> str:
    from replay.source import live_bundles

    async with _connected(args, create_streams=False) as (store, bus):
        found = await live_bundles(store, bus, replay.options.window)
        if found is None:
            raise Refused(f"{store.label} holds no reconciler tick in that window (has a reconciler run there?)")
        bundles, close = found
        try:
            async for bundle in bundles:
                if not replay.feed(bundle):
                    break
                progress.update(1)
        finally:
            await close()
        return f"{store.label} and {bus.stream(subjects.EVENTS_STREAM)}"


@contextlib.asynccontextmanager
async def _connected(args: argparse.Namespace, *, create_streams: bool, partitions: int = 0,
                     need_store: bool = True, need_bus: bool = True) -> AsyncIterator[tuple[Any, Any]]:
    """The store and the bus (each None when not needed), closed afterwards."""
    from runtime.bus import Bus, NatsUnavailable, StreamError, close, connect, ensure_streams
    from runtime.natsserver import EmbeddedNats, NatsServerUnusable
    from store.engine import open_store
    from store.errors import DatabaseUnavailable

    async with contextlib.AsyncExitStack() as stack:
        store = bus = None
        if need_store:
            Path(args.data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                store = await open_store(args.db_url, args.data_dir,
                                         statement_timeout=flags.statement_timeout(args))
            except DatabaseUnavailable as exc:
                raise Refused(str(exc)) from None
            stack.push_async_callback(store.close)
        if need_bus:
            url = args.nats_url
            if not url:
                embedded = EmbeddedNats(Path(args.data_dir) / "nats")
                try:
                    url = await embedded.start()
                except (FileNotFoundError, NatsServerUnusable) as exc:
                    raise Refused(str(exc)) from None
                stack.push_async_callback(embedded.stop)
            try:
                nc = await connect(url, "kubus-replay", reconnect=False, auth=flags.nats_auth(args))
            except NatsUnavailable as exc:
                raise Refused(str(exc)) from None
            stack.push_async_callback(close, nc)
            if create_streams:
                try:
                    bus = await ensure_streams(nc, prefix=args.prefix, partitions=partitions,
                                               settings=flags.stream_settings(args))
                except StreamError as exc:
                    raise Refused(str(exc)) from None
            else:
                from nats.js.errors import NotFoundError

                bus = Bus(nc, nc.jetstream(), args.prefix, 0)
                try:
                    await bus.js.stream_info(bus.stream(subjects.EVENTS_STREAM))
                except NotFoundError:
                    stream = bus.stream(subjects.EVENTS_STREAM)
                    raise Refused(f"no stream {stream} at {url} (wrong --prefix?)") from None
        yield store, bus


# --- kubus events export / import -------------------------------------------------------------------------
def run_export(args: argparse.Namespace) -> int:
    from replay.source import SourceError

    try:
        counts = asyncio.run(_export(args))
    except (Refused, SourceError, OSError) as exc:
        return _fail("events export", str(exc))
    if counts is None:
        return _fail("events export", "no reconciler tick in that window: nothing to export")
    summary = ", ".join(f"{n:,} {kind}" for kind, n in counts.items())
    print(f"kubus events export: {summary} lines", file=sys.stderr)
    return 0


async def _export(args: argparse.Namespace) -> dict[str, int] | None:
    from replay.exporting import export

    window = _window(args)
    async with _connected(args, create_streams=False) as (store, bus):
        source = {"store": store.label, "stream": bus.stream(subjects.EVENTS_STREAM), "prefix": args.prefix}
        if window:
            source["window"] = {k: str(v) for k, v in vars(window).items() if v is not None}
        out: IO[bytes]
        with Progress("kubus events export", "ticks") as progress:
            if args.output == "-":
                return await export(store, bus, sys.stdout.buffer, window, decisions=not args.no_decisions,
                                    source=source, progress=progress.update)
            with open(args.output, "wb") as out:
                return await export(store, bus, out, window, decisions=not args.no_decisions, source=source,
                                    progress=progress.update)


def run_import(args: argparse.Namespace) -> int:
    from replay.exporting import ImportRefused
    from replay.fileformat import FormatError

    if args.no_store and args.no_stream:
        return _fail("events import", "--no-store and --no-stream: nothing to import into")
    try:
        counts = asyncio.run(_import(args))
    except FormatError as exc:
        return _fail("events import", f"{args.file}: {exc}")
    except (Refused, ImportRefused, OSError) as exc:
        return _fail("events import", str(exc))
    print("kubus events import: " + ", ".join(f"{n:,} {kind}" for kind, n in counts.items()), file=sys.stderr)
    return 0


async def _import(args: argparse.Namespace) -> dict[str, int]:
    from replay.exporting import import_file

    async with _connected(args, create_streams=True, partitions=args.partitions, need_store=not args.no_store,
                          need_bus=not args.no_stream) as (store, bus):
        with Progress("kubus events import", "ticks") as progress:
            return await import_file(args.file, store, bus, progress=progress.update)
