"""The prometheus plumbing every kubus service shares: one registry per process, and the client-go metrics.

A process serves its /metrics from ONE prometheus_client registry: `REGISTRY` (prometheus_client's default,
with the process's own `process_*` and `python_*` metrics). The reconciler's metrics (runtime/serving.py,
reconciler/metrics.py) are module-level on it; ingest's and the executor's are made per service, on the
registry their service is given: `REGISTRY` when `kubus up|ingest|execute` wires them (kubus/pipeline_command.py),
a private one by default, so that tests and benchmarks running several of them in one process count each apart.

`CounterMap` and `GaugeMap` show a labelled metric as a dict of its series' values (`counts[kind] += 1` adds
to the series): the services keep no numbers of their own beside the registry's.

`RestClientMetrics` is client-go's `rest_client_requests_total{code,method,host}` and
`rest_client_request_duration_seconds{verb,host}`, for ingest and the executor alike; `instrument` counts every
request an official `kubernetes` ApiClient sends.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["REGISTRY", "CounterMap", "GaugeMap", "RestClientMetrics", "histogram", "instrument", "private"]

# client-go's requestLatency buckets (k8s.io/component-base/metrics/prometheus/restclient)
REQUEST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
# client-go's workqueue buckets: 1 ns to 10 s, by tens (k8s.io/component-base/metrics/prometheus/workqueue)
WORKQUEUE_BUCKETS = tuple(10.0 ** e for e in range(-9, 2))
ERROR_CODE = "<error>"  # the code of a request that got no answer, as client-go says it


def private() -> CollectorRegistry:
    """A registry of its own, for a service that is not wired to serve /metrics (tests, benchmarks)."""
    return CollectorRegistry(auto_describe=True)


def histogram(name: str, documentation: str, labels: Sequence[str] = (), *, buckets: Sequence[float],
              registry: CollectorRegistry = REGISTRY) -> Histogram:
    return Histogram(name, documentation, labels, buckets=buckets, registry=registry)


def _key(key: Any) -> tuple[str, ...]:
    return tuple(str(k) for k in key) if isinstance(key, tuple) else (str(key),)


def _unkey(values: tuple[str, ...]) -> Any:
    return values if len(values) > 1 else values[0]


class _Map(Mapping[Any, float]):
    """A labelled metric seen as a read-only mapping {label value (or tuple of them): the series' value}; a
    series exists once it was written."""

    def __init__(self, metric: Counter | Gauge) -> None:
        self.metric = metric
        self._series: dict[tuple[str, ...], Any] = {}  # label values -> the prometheus child, looked up once

    def _found(self, key: Any) -> Any:
        """The series `key` if written, else None. Callers pass label values that are str (a kind, a tuple of
        them) nearly always, and the series are keyed by exactly those tuples: looked up as they are first, and
        through _key's str() of each value (which builds a tuple from a generator, every event) only on a miss.
        A key of other types never equals a tuple of str, so it misses and is converted."""
        try:
            child = self._series.get(key if type(key) is tuple else (key,))
        except TypeError:  # unhashable (a list): only its str() names a series
            child = None
        return child if child is not None else self._series.get(_key(key))

    def _child(self, key: Any) -> Any:
        child = self._found(key)
        if child is None:
            values = _key(key)
            child = self._series[values] = self.metric.labels(*values)
        return child

    def __getitem__(self, key: Any) -> float:
        """The series' value; 0 for one never written (as the dicts of counts this replaces)."""
        child = self._found(key)
        return 0.0 if child is None else float(child._value.get())

    def __contains__(self, key: object) -> bool:
        return self._found(key) is not None

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:  # not Mapping.get: __getitem__ answers 0 for a series never written
            return default
        return self[key]

    def __iter__(self) -> Iterator[Any]:
        return (_unkey(values) for values in list(self._series))

    def __len__(self) -> int:
        return len(self._series)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


class CounterMap(_Map):
    """`counts[key] += n` adds n to the counter's series `key`; a counter only goes up."""

    def __setitem__(self, key: Any, value: float) -> None:
        child = self._child(key)
        delta = value - float(child._value.get())
        if delta < 0:
            raise ValueError(f"counter {self.metric._name}{_key(key)} cannot go down (to {value})")
        child.inc(delta)

    def inc(self, key: Any, amount: float = 1.0) -> None:
        self._child(key).inc(amount)


class GaugeMap(_Map):
    """`gauge[key] = value` sets the gauge's series `key` (True and False as 1 and 0)."""

    def __setitem__(self, key: Any, value: float) -> None:
        self._child(key).set(float(value))


class RestClientMetrics:
    """client-go's rest_client metrics, on `registry`: one set per registry (`of`), which every API client of
    the process counts on (`kubus up`'s ingest and executor alike, told apart by nothing but their requests)."""

    @classmethod
    def of(cls, registry: CollectorRegistry = REGISTRY) -> RestClientMetrics:
        metrics = _REST.get(registry)
        if metrics is None:
            metrics = _REST[registry] = cls(registry)
        return metrics

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.requests = CounterMap(Counter(
            "rest_client_requests_total", "API requests, by status code (<error>: no answer), method and host",
            ["code", "method", "host"], registry=registry))
        self.latency = histogram("rest_client_request_duration_seconds",
                                 "API request latency in seconds, to the response's headers, by verb and host",
                                 ["verb", "host"], buckets=REQUEST_BUCKETS, registry=registry)
        self._latency_by: dict[tuple[str, str], Any] = {}  # its children, as CounterMap keeps a counter's

    def observe(self, method: str, host: str, code: int, seconds: float) -> None:
        self.requests.inc((str(code) if code else ERROR_CODE, method, host))
        child = self._latency_by.get((method, host))
        if child is None:  # prometheus_client's labels() takes a lock and builds its key on every call
            child = self._latency_by[(method, host)] = self.latency.labels(method, host)
        child.observe(seconds)

    def by_method(self) -> dict[str, dict[str, int]]:
        """{method: {code: requests}}, every host together (what tests compare)."""
        out: dict[str, dict[str, int]] = {}
        for (code, method, _host), n in sorted(self.requests.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            by_code = out.setdefault(method, {})
            by_code[code] = by_code.get(code, 0) + int(n)
        return out


_REST: weakref.WeakKeyDictionary[CollectorRegistry, RestClientMetrics] = weakref.WeakKeyDictionary()


def host_of(url: str) -> str:
    return urlsplit(url).netloc


def instrument(api: Any, metrics: RestClientMetrics, clock: Callable[[], float] = time.monotonic) -> None:
    """Counts and times every request the `kubernetes` ApiClient `api` sends (lists, watches, gets): to its
    response's headers, as client-go does (a watch's stream is not part of its latency)."""
    rest = api.rest_client
    send = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        started = clock()
        code = 0
        try:
            response = send(method, url, *args, **kwargs)
            code = response.status
            return response
        except Exception as exc:  # the client's ApiException carries the answer's status, 0 for none
            code = int(getattr(exc, "status", 0) or 0)
            raise
        finally:
            metrics.observe(method, host_of(url), code, clock() - started)

    rest.request = request
