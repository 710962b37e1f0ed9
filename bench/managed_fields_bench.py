"""What leaving managedFields out of every published event saves, per event, on objects of a real API server.

    .venv/bin/python -m bench.managed_fields_bench
    .venv/bin/python -m bench.managed_fields_bench --runs 7 --events 20000

The objects are tests/ingest/apiserver_objects.json: a pod as kubus created it, the same pod Running (kwok's
status written), and a kwok node, as kube-apiserver v1.36 sent them on ingest's watches. Per object, with the
managedFields kept (the baseline: what ingest published before) and left out (ingest/observing.py,
`without_managed_fields`):

- bytes: the event as published (stored in KUBUS_EVENTS and again in KUBUS_STATE, and read by every consumer);
- ingest: `observe` (the trim, the model's decoding that proves the object usable) and the event's encoding;
- reconciler: the event's decoding (messages/codec.py) and its object's into the model, as its cache folds it.

CPU is this process's (time.process_time), the median of --runs runs of --events events each; the ratio is
left out / kept (below 1: cheaper).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from bench.loadgen import machine
from ingest import observing
from ingest.kinds import KINDS
from kube import codec as kube_codec
from messages import codec

OBJECTS = Path(__file__).resolve().parent.parent / "tests" / "ingest" / "apiserver_objects.json"
ORIGIN = observing.Origin("ingest-bench", "2026-11-29T16:00:00.000000Z")
KIND_OF = {"pod-created": "Pod", "pod-running": "Pod", "node": "Node"}


def _cpu_us(work: Callable[[], object], events: int, runs: int) -> float:
    """Median CPU µs per call of `work` over `runs` runs of `events` calls."""
    per_run = []
    for _ in range(runs):
        start = time.process_time()
        for _ in range(events):
            work()
        per_run.append((time.process_time() - start) / events * 1e6)
    return statistics.median(per_run)


def measure(name: str, raw: msgspec.Raw, events: int, runs: int, trim: bool) -> tuple[int, float, float]:
    """(event bytes, ingest µs, reconciler µs) for one object, its managedFields left out or kept."""
    spec = KINDS[KIND_OF[name]]
    kept = observing.without_managed_fields
    if not trim:  # the baseline: the object as the API sent it
        observing.without_managed_fields = lambda raw: raw
    try:
        event = observing.observe(spec, "MODIFIED", raw, ORIGIN)
        data = codec.encode(event)
        ingest = _cpu_us(lambda: codec.encode(observing.observe(spec, "MODIFIED", raw, ORIGIN)), events, runs)
    finally:
        observing.without_managed_fields = kept
    reconciler = _cpu_us(lambda: kube_codec.decode(codec.decode_observed(data).object, spec.model), events, runs)
    return len(data), ingest, reconciler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.managed_fields_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000, help="events per run (default 10,000)")
    parser.add_argument("--runs", type=int, default=5, help="runs; the median is printed (default 5)")
    args = parser.parse_args(argv)
    objects = json.loads(OBJECTS.read_text())
    print(machine())
    print(f"{args.runs} runs of {args.events:,} events per object; CPU µs per event, median")
    print("| object | event bytes kept / left out (ratio) | ingest µs kept / left out (ratio) "
          "| reconciler µs kept / left out (ratio) |")
    print("| --- | --- | --- | --- |")
    for name in KIND_OF:
        raw = msgspec.Raw(json.dumps(objects[name], separators=(",", ":")).encode())
        size0, ingest0, rec0 = measure(name, raw, args.events, args.runs, trim=False)
        size1, ingest1, rec1 = measure(name, raw, args.events, args.runs, trim=True)
        print(f"| {name} | {size0:,} / {size1:,} ({size1 / size0:.2f}) | {ingest0:.1f} / {ingest1:.1f} "
              f"({ingest1 / ingest0:.2f}) | {rec0:.1f} / {rec1:.1f} ({rec1 / rec0:.2f}) |")


if __name__ == "__main__":
    main()
