"""Log setup shared by every kubus command: plain text, or one JSON object a line.

Every line goes through runtime.redact: a URL with a password or token in a message or a traceback is
printed without it, whoever logged it (kubus, nats-py, asyncpg, the kubernetes client).

A line about an object carries its fields (FIELDS: `controller`, `namespace`, `name`, and where relevant
`decision`, `action`, `key`, `partition`): given to one call with `extra=logs.fields(...)`, or to every line
logged within `with logs.context(...)` (a contextvar: an asyncio task's lines only). JSON lines have them as
fields of their own; text lines stay as they were (the message names the object).

    log.error("quarantined %s %s/%s: %s", kind, ns, name, error, extra=logs.fields(namespace=ns, name=name))
    with logs.context(**logs.of_controller(action.controller), action=tag, key=action.key): ...
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from messages.keys import parse_controller_key
from runtime import redact

FIELDS = ("controller", "namespace", "name", "kind", "decision", "action", "key", "partition")
EXTRA = "kubus"  # the LogRecord attribute holding a line's fields (`name` is the logger's: not a field of its own)
_NONE: Mapping[str, Any] = MappingProxyType({})
_CONTEXT: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("kubus_log_fields", default=_NONE)


def fields(*, controller: str | None = None, namespace: str | None = None, name: str | None = None,
           kind: str | None = None, decision: int | str | None = None, action: str | None = None,
           key: str | None = None, partition: int | str | None = None) -> dict[str, dict[str, Any]]:
    """`extra=` for one log call: the fields given (None: not about that). `kind`: the object's, where no
    controller is (ingest's lines)."""
    given = {"controller": controller, "namespace": namespace, "name": name, "kind": kind, "decision": decision,
             "action": action, "key": key, "partition": partition}
    return {EXTRA: {k: v for k, v in given.items() if v is not None}}


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise TypeError(f"not a log field: {', '.join(sorted(unknown))} (one of {', '.join(FIELDS)})")
    return {k: v for k, v in values.items() if v is not None}


def bind(**values: Any) -> None:
    """Every line the current asyncio task logs from now on carries these fields (a task has a copy of the
    context of the one that created it: what it binds stays its own)."""
    _CONTEXT.set({**_CONTEXT.get(), **_checked(values)})


@contextlib.contextmanager
def context(**values: Any) -> Iterator[None]:
    """Every line logged within (by this task) carries these fields, as `fields` takes them."""
    token = _CONTEXT.set({**_CONTEXT.get(), **_checked(values)})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def of_controller(controller_key: str) -> dict[str, str]:
    """The fields of a controller key ("ReplicaSet/ns/name"): controller (lowercase, as kube-controller-manager
    names it), namespace and name; {} for a key that is not one."""
    key = parse_controller_key(controller_key)
    if key is None:
        return {}
    return {"controller": key.kind.value.lower(), "namespace": key.namespace, "name": key.name}


CONTEXT_ATTRIBUTE = "kubus_context"  # the context's fields, as the record was made


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """A record's fields: the context's when it was logged, then its own call's."""
    return {**getattr(record, CONTEXT_ATTRIBUTE, {}), **getattr(record, EXTRA, {})}


def _with_context(make: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        context = _CONTEXT.get()
        if context:
            setattr(record, CONTEXT_ATTRIBUTE, context)
        return record
    return make_record


# the fields are taken as a record is made, in the task that logs it: a handler that formats it later (or
# elsewhere: pytest's caplog, a queue) sees the same
logging.setLogRecordFactory(_with_context(logging.getLogRecordFactory()))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact.text(record.getMessage()),
        }
        for field, value in fields_of(record).items():
            entry[field] = redact.text(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["error"] = redact.text(self.formatException(record.exc_info))
        return json.dumps(entry)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact.text(super().format(record))


def configure(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add("--log-format", default="text", choices=["text", "json"])
