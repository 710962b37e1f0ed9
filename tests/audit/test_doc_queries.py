"""docs/audit.md's example queries, executed as written on SQLite and PostgreSQL against the scripted
history: the doc cannot rot, and the views answer the questions it says they answer."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from store.engine import Store
from tests.audit.scenario import DS, RS, Scenario

DOC = Path(__file__).parents[2] / "docs" / "audit.md"
QUERY = re.compile(r"<!-- query: ([a-z0-9-]+) -->\n```sql\n(.*?)```", re.DOTALL)


def doc_queries() -> dict[str, str]:
    return {name: sql.strip().rstrip(";") for name, sql in QUERY.findall(DOC.read_text())}


def normal(value: Any) -> Any:
    """One spelling for both backends: timestamps as SQLite's text, JSON decoded."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, str) and value.startswith("{"):
        return json.loads(value)
    return value


async def run(store: Store, sql: str) -> list[tuple[Any, ...]]:
    # exec_driver_sql: the doc's SQL verbatim (text() would take ':00' in a timestamp for a parameter)
    async with store.engine.connect() as conn:
        result = await conn.exec_driver_sql(sql)
        return [tuple(normal(v) for v in row) for row in result]


def expected(s: Scenario) -> dict[str, list[tuple[Any, ...]]]:
    c1, c3 = s.correlation[1], s.correlation[3]
    quota = 'pods "agent-bbbbb" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2'
    return {
        "actions-for-daemonset": [
            ("2025-06-01 10:00:01.000000", s.decision_ids[1], "create_pods", "Pod", "agent-aaaaa",
             f"{c1}/create/node-1", "succeeded", 201, "ADDED", 2),
            ("2025-06-01 10:00:01.000000", s.decision_ids[1], "create_pods", "Pod", "agent-bbbbb",
             f"{c1}/create/node-2", "failed", 403, None, None),
            ("2025-06-01 10:00:01.000000", s.decision_ids[1], "update_status", "DaemonSet", "agent",
             f"{c1}/status", "succeeded", 200, "MODIFIED", 3),
        ],
        "why-pod-deleted": [
            ("2025-06-01 10:02:00.500000", RS, c3, "too many replicas: deleting 2",
             {"reason": "too many replicas: deleting 2", "replicas": 1, "active": 3, "diff": 2,
              "deleting": ["web-m4q9z", "web-d5f8h"], "deletes": ["web-m4q9z", "web-d5f8h"]},
             "ReplicaSet", "web", "MODIFIED", 8, 8, f"{c3}/delete/pod-w2", "succeeded", "DELETED", 10),
        ],
        "failed-actions": [
            ("2025-06-01 10:00:02.000000", DS, "create_pods", "agent-bbbbb", f"{c1}/create/node-2", 403,
             "Forbidden", quota),
        ],
        "slowest-syncs": [
            (75.0, "2025-06-01 10:02:00.500000", RS, "too many replicas: deleting 2", "ReplicaSet", "web",
             "MODIFIED", 2),
            (40.0, "2025-06-01 10:01:01.000000", RS, "too few replicas: creating 3", "ReplicaSet", "web", "ADDED", 1),
            (20.0, "2025-06-01 11:30:00.000000", DS, "manage: 1 node needs a daemon pod", "Node", "node-3", "ADDED",
             1),
        ],
        "pods-per-minute": [("2025-06-01 10:00", 1), ("2025-06-01 10:01", 3), ("2025-06-01 11:30", 1)],
        "what-an-event-caused": [
            ("ReplicaSet", "web", "MODIFIED", c3, "too many replicas: deleting 2", "delete_pod", "web-m4q9z",
             f"{c3}/delete/pod-w2", "succeeded", "DELETED", 10),
            ("ReplicaSet", "web", "MODIFIED", c3, "too many replicas: deleting 2", "delete_pod", "web-d5f8h",
             f"{c3}/delete/pod-w3", "succeeded", "DELETED", 11),
        ],
        "unfinished-actions": [
            ("2025-06-01 10:02:01.500000", RS, "update_status", "web", f"{s.correlation[33]}/status", "pending"),
        ],
    }


def test_the_doc_has_every_query_the_issue_asks_for() -> None:
    assert set(doc_queries()) == {"actions-for-daemonset", "why-pod-deleted", "failed-actions", "slowest-syncs",
                                  "pods-per-minute", "what-an-event-caused", "unfinished-actions"}


@pytest.mark.parametrize("name", sorted(doc_queries()))
async def test_doc_query(name: str, store: Store, history: Scenario) -> None:
    """The query, copied from docs/audit.md, returns exactly the scenario's rows on this backend."""
    assert await run(store, doc_queries()[name]) == expected(history)[name]
