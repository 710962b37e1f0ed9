"""The reconciler's metrics, named as controller-runtime and client-go name them, on the process's registry.

- `workqueue_*{name="daemonset"|"replicaset"}`: each controller's key queue (reconciler/core/workqueue.py), as
  client-go's workqueue reports it. The queue is the core's, pure: it tells a `WorkqueueProbe` what happens to
  its keys and the probe reads the shell's clock (time.perf_counter, the syncs' stopwatch). Keys are synced one
  after the other on the event loop, so a scrape (on the same loop) sees `unfinished_work_seconds` and
  `longest_running_processor_seconds` at 0 unless a sync is running.
- `controller_runtime_reconcile_total{controller,result}` (result: success, error, requeue, requeue_after, from
  the decision's own error and requeue; reconciler.core.controllers.Decided.result),
  `controller_runtime_reconcile_errors_total{controller}` and `controller_runtime_reconcile_time_seconds`.
- `kubus_reconciler_intake_depth`: events received from NATS, waiting for the loop (not a controller's queue).
- `kubus_partitions`, `kubus_reconciler_partitions_held` and `kubus_reconciler_lease_epoch{partition}`: the
  partitions there are, those this reconciler decides for (`kubus up`'s: every one, unfenced, no lease) and the
  epoch of each lease it holds (reconciler/leases.py), read at scrape time.
"""

from __future__ import annotations

import collections
import functools
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric

from reconciler.core.controllers import Decided
from runtime.metrics import REGISTRY, WORKQUEUE_BUCKETS, histogram

CONTROLLERS = ("daemonset", "replicaset")  # the label values: lowercase, as kube-controller-manager names them

DEPTH = Gauge("workqueue_depth", "Current depth of a controller's key queue (keys ready, not yet taken)", ["name"])
ADDS = Counter("workqueue_adds_total", "Keys added to a controller's key queue", ["name"])
RETRIES = Counter("workqueue_retries_total", "Keys re-added with the rate limiter (failed syncs)", ["name"])
QUEUE_DURATION = histogram("workqueue_queue_duration_seconds",
                           "How long a key waits in the queue before it is taken", ["name"], buckets=WORKQUEUE_BUCKETS)
WORK_DURATION = histogram("workqueue_work_duration_seconds", "How long processing a key takes", ["name"],
                          buckets=WORKQUEUE_BUCKETS)
UNFINISHED = Gauge("workqueue_unfinished_work_seconds",
                   "Seconds of work in progress not yet observed by work_duration (keys being processed)", ["name"])
LONGEST = Gauge("workqueue_longest_running_processor_seconds",
                "How long the longest-running key being processed has been", ["name"])

RECONCILES = Counter("controller_runtime_reconcile_total", "Syncs by controller and result "
                     "(success, error, requeue, requeue_after)", ["controller", "result"])
RECONCILE_ERRORS = Counter("controller_runtime_reconcile_errors_total", "Syncs that returned an error",
                           ["controller"])
RECONCILE_TIME = histogram("controller_runtime_reconcile_time_seconds", "Time of one sync", ["controller"],
                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
INTAKE_DEPTH = Gauge("kubus_reconciler_intake_depth", "Events received from NATS and waiting for the reconciler's "
                     "loop (the intake, not a controller's key queue)")


class LabelledCounts:
    """A labelled Counter's increments, added once per label values for a batch of them: an `inc` takes the child's
    lock (~3 µs), and the reconciler counts every event it folds (kubus_reconciler_events_total). The children are
    looked up once."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._children: dict[tuple[str, ...], Any] = {}

    def add(self, labels: Iterable[tuple[str, ...]]) -> None:
        """One increment for each item of `labels` (the counter's label values, in the order of its labels)."""
        for values, amount in collections.Counter(labels).items():
            child = self._children.get(values)
            if child is None:
                child = self._children[values] = self._counter.labels(*values)
            child.inc(amount)


def name_of(key: Any) -> str:
    """A controller key's queue name: its kind, lowercase ("ReplicaSet/ns/name" -> "replicaset")."""
    return str(key.kind.value).lower()


class WorkqueueProbe:
    """client-go's queueMetrics for the controllers' key queue: told by the queue (and the dispatcher popping it)
    what happens to each key, timed with `clock`. Live until `close()`: the depth and unfinished-work gauges
    sum what every live probe holds (a reconciler replaced after a stream reset closes its own)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._added: dict[Hashable, float] = {}  # key -> when it entered the ready queue
        self._processing: dict[Hashable, float] = {}  # key -> when its processing started
        _LIVE.add(self)

    def added(self, key: Hashable) -> None:
        ADDS.labels(name_of(key)).inc()
        self._added.setdefault(key, self._clock())

    def retried(self, key: Hashable) -> None:
        RETRIES.labels(name_of(key)).inc()

    def started(self, key: Hashable) -> None:
        now = self._clock()
        added = self._added.pop(key, None)
        if added is not None:
            QUEUE_DURATION.labels(name_of(key)).observe(now - added)
        self._processing[key] = now

    def finished(self, key: Hashable) -> None:
        started = self._processing.pop(key, None)
        if started is not None:
            WORK_DURATION.labels(name_of(key)).observe(self._clock() - started)

    def close(self) -> None:
        _LIVE.discard(self)

    def depth(self, name: str) -> int:
        return sum(1 for key in self._added if name_of(key) == name)

    def running(self, name: str) -> list[float]:
        """How long each key of `name` being processed has been."""
        now = self._clock()
        return [now - started for key, started in self._processing.items() if name_of(key) == name]


_LIVE: weakref.WeakSet[WorkqueueProbe] = weakref.WeakSet()


def _depth(name: str) -> float:
    return float(sum(probe.depth(name) for probe in list(_LIVE)))


def _unfinished(name: str) -> float:
    return sum(sum(probe.running(name)) for probe in list(_LIVE))


def _longest(name: str) -> float:
    return max((max(probe.running(name), default=0.0) for probe in list(_LIVE)), default=0.0)


for _name in CONTROLLERS:  # every series from the start, at 0: a dashboard shows the queues before any key
    DEPTH.labels(_name).set_function(functools.partial(_depth, _name))
    UNFINISHED.labels(_name).set_function(functools.partial(_unfinished, _name))
    LONGEST.labels(_name).set_function(functools.partial(_longest, _name))
    ADDS.labels(_name)
    RETRIES.labels(_name)
    QUEUE_DURATION.labels(_name)
    WORK_DURATION.labels(_name)
    RECONCILE_TIME.labels(_name)
    RECONCILE_ERRORS.labels(_name)
    for _result in ("success", "error", "requeue", "requeue_after"):
        RECONCILES.labels(_name, _result)


def reconciled(decided: Decided) -> None:
    """Counts and times one sync, by its decision's own result."""
    controller = decided.controller_kind.lower()
    result = decided.result
    RECONCILES.labels(controller, result).inc()
    if result == "error":
        RECONCILE_ERRORS.labels(controller).inc()
    RECONCILE_TIME.labels(controller).observe(decided.duration_ms / 1000)


class _Partitions:
    """The partitions this process's reconciler decides for, read at scrape time from what `held` was given."""

    def __init__(self) -> None:
        self.partitions = 0
        self.leases: Callable[[], Mapping[int, int]] | None = None  # None: every partition, unfenced

    def collect(self) -> Iterator[Metric]:
        if not self.partitions:  # no reconciler in this process
            return
        leases = self.leases() if self.leases is not None else None
        yield GaugeMetricFamily("kubus_partitions", "Partitions the streams have (namespaces are hashed onto them)",
                                value=self.partitions)
        yield GaugeMetricFamily("kubus_reconciler_partitions_held", "Partitions this reconciler decides for (kubus "
                                "up: every one, without leases)", value=self.partitions if leases is None
                                else len(leases))
        epochs = GaugeMetricFamily("kubus_reconciler_lease_epoch", "The epoch of each partition lease this "
                                   "reconciler holds (a split deployment's; it grows at every change of owner)",
                                   labels=["partition"])
        for partition, epoch in sorted((leases or {}).items()):
            epochs.add_metric([str(partition)], epoch)
        yield epochs


PARTITIONS = _Partitions()
REGISTRY.register(PARTITIONS)


def held(partitions: int, leases: Callable[[], Mapping[int, int]] | None) -> None:
    """What the partition gauges report from now on: `leases()` ({partition: epoch}, a lease keeper's), or every
    one of the `partitions` (None: a reconciler alone, unfenced)."""
    PARTITIONS.partitions, PARTITIONS.leases = partitions, leases
