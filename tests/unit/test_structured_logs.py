"""`--log-format json`: a line about an object carries controller, namespace, name and, where relevant, decision,
action, key and partition as JSON fields of its own (issue 24); `text` lines read as before."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import pytest

from kube.meta import LabelSelector, LabelSelectorRequirement
from kube.testing import replicaset
from reconciler.core.controllers import Controllers
from runtime import logs
from tests.reconciler.builders import NOW, Cluster
from tests.reconciler.test_controllers import sync

JSON = logs.JsonFormatter()
TEXT = logs.TextFormatter("%(levelname)s %(name)s: %(message)s")


def as_json(record: logging.LogRecord) -> dict[str, object]:
    return json.loads(JSON.format(record))  # type: ignore[no-any-return]


def invalid_selector_sync(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """reconciler/core/controllers.py: a sync's bad input, logged by the dispatcher."""
    selector = LabelSelector(match_expressions=[LabelSelectorRequirement(key="app", operator="Bogus")])
    cluster = Cluster()
    controllers = Controllers(cluster.cache)
    controllers.observe([cluster.add(replicaset("web").ns("shop").raw_selector(selector).build())], NOW)
    with caplog.at_level(logging.ERROR, logger="kubus.reconciler"):
        decided = sync(controllers).decisions[0]
    (record,) = [r for r in caplog.records if "invalid selector" in r.getMessage()]
    record.expected_decision = decided.correlation_id  # type: ignore[attr-defined]
    return record


def action_task(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """executor/consuming.py binds an action's fields to its task: a line logged deep in it (here, as
    executor/events.py's) carries them, and so does a task it starts (an event recorded in the background)."""
    log = logging.getLogger("kubus.executor.events")

    async def handle() -> None:
        logs.bind(**logs.of_controller("ReplicaSet/shop/web"), action="create_pods", key="web@7~1/create",
                  decision=42, partition="3")

        async def background() -> None:
            log.warning("event shop/web.1 (SuccessfulCreate: Created pod) not recorded: 500")
        await asyncio.create_task(background())

    async def other() -> None:
        log.warning("a line of another task")

    async def both() -> None:
        await asyncio.gather(handle(), other())

    with caplog.at_level(logging.WARNING, logger="kubus.executor.events"):
        asyncio.run(both())
    unbound = [r for r in caplog.records if "another task" in r.getMessage()]
    assert [logs.fields_of(r) for r in unbound] == [{}]  # a task's binding is its own
    (record,) = [r for r in caplog.records if "not recorded" in r.getMessage()]
    record.expected_decision = 42  # type: ignore[attr-defined]
    return record


def quarantined(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """ingest/watching.py: an object that does not decode (the call's own fields)."""
    log = logging.getLogger("kubus.ingest")
    with caplog.at_level(logging.ERROR, logger="kubus.ingest"):
        log.error("quarantined %s %s/%s: %s", "Pod", "shop", "web-1", "$.spec.hostNetwork: expected bool",
                  extra=logs.fields(kind="Pod", namespace="shop", name="web-1"))
    record = caplog.records[-1]
    record.expected_decision = None  # type: ignore[attr-defined]
    return record


@pytest.mark.parametrize(("site", "expected"), [
    pytest.param(invalid_selector_sync, {"controller": "replicaset", "namespace": "shop", "name": "web"},
                 id="reconciler-sync-warning"),
    pytest.param(action_task, {"controller": "replicaset", "namespace": "shop", "name": "web",
                               "action": "create_pods", "key": "web@7~1/create", "partition": "3"},
                 id="executor-action"),
    pytest.param(quarantined, {"kind": "Pod", "namespace": "shop", "name": "web-1"}, id="ingest-quarantine"),
])
def test_a_line_about_an_object_carries_its_fields(
        caplog: pytest.LogCaptureFixture, site: Callable[[pytest.LogCaptureFixture], logging.LogRecord],
        expected: dict[str, str]) -> None:
    record = site(caplog)
    entry = as_json(record)
    assert {k: entry[k] for k in expected} == expected
    assert entry.get("decision") == record.expected_decision  # type: ignore[attr-defined]
    assert {"ts", "level", "logger", "msg"} <= set(entry)
    assert entry["logger"] == record.name  # `name` is the object's, the logger keeps its own key
    # text stays the line it was: the message names the object, no field list appended
    assert TEXT.format(record) == f"{record.levelname} {record.name}: {record.getMessage()}"


def test_fields_are_redacted_as_messages_are() -> None:
    record = logging.LogRecord("kubus.ingest", logging.ERROR, __file__, 1, "cannot reach", None, None)
    record.kubus = {"key": "nats://user:s3cret@nats:4222"}
    assert "s3cret" not in JSON.format(record)


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="not a log field: pod"), logs.context(pod="web-1"):
        pass


def test_a_context_ends_with_its_block() -> None:
    log = logging.getLogger("kubus.test")
    with logs.context(partition=3):
        inside = log.makeRecord("kubus.test", logging.INFO, __file__, 1, "inside", None, None)
    outside = log.makeRecord("kubus.test", logging.INFO, __file__, 1, "outside", None, None)
    assert (logs.fields_of(inside), logs.fields_of(outside)) == ({"partition": 3}, {})
