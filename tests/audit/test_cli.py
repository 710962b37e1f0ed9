"""`kubus audit` from the shell: tables, --json, time ranges, and plain errors for what it does not know."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kubus import audit_command
from kubus.cli import build_parser
from tests.audit.conftest import Audit
from tests.audit.scenario import Scenario


def test_pod_table(kubus_audit: Audit, history: Scenario) -> None:
    """Who created the pod and who deleted it, why, and the events that confirmed both (-o wide: every column)."""
    code, out, err = kubus_audit("pod", "default/web-m4q9z", "-o", "wide")
    assert (code, err) == (0, "")
    c2, c3 = history.correlation[2], history.correlation[3]
    lines = out.splitlines()
    assert lines[:3] == [
        "Pod default/web-m4q9z",
        f"  created by ReplicaSet/default/web (decision {history.decision_ids[2]} at 2025-06-01T10:01:01.000Z): "
        "too few replicas: creating 3",
        f"  deleted by ReplicaSet/default/web (decision {history.decision_ids[3]} at 2025-06-01T10:02:00.500Z): "
        "too many replicas: deleting 2",
    ]
    actions = lines[lines.index("ACTIONS") + 1:lines.index("DECISIONS") - 1]
    assert [line.split() for line in actions] == [
        ["DECIDED", "DECISION", "ACTION", "TARGET", "KEY", "OUTCOME", "CODE", "REASON", "CONFIRMED"],
        ["2025-06-01T10:01:01.000Z", "2", "create_pods", "Pod", "web-m4q9z", f"{c2}/create/1", "succeeded", "201", "-",
         "ADDED", "#6", "2025-06-01T10:01:02.500Z"],
        ["2025-06-01T10:02:00.500Z", "3", "delete_pod", "Pod", "web-m4q9z", f"{c3}/delete/pod-w2", "succeeded", "200",
         "-", "DELETED", "#10", "2025-06-01T10:02:05.000Z"],
    ]
    # aligned: a column starts at the same offset on every line of its table
    outcome = actions[0].index("OUTCOME")
    assert all(row[outcome:].startswith("succeeded ") for row in actions[1:])
    assert "ReplicaSet default/web MODIFIED #8  too many replicas: deleting 2" in out
    events = lines[lines.index("WATCH EVENTS") + 2:]
    assert [line.split()[:2] for line in events] == [["6", "ADDED"], ["9", "MODIFIED"], ["10", "DELETED"]]


def test_pod_json(kubus_audit: Audit, history: Scenario) -> None:
    code, out, _ = kubus_audit("pod", "default/web-m4q9z", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["pod"] == "default/web-m4q9z"
    assert [(a["action"], a["outcome"], a["confirmed_by"], a["confirmed_at"]) for a in doc["actions"]] == [
        ("create_pods", "succeeded", "ADDED", "2025-06-01T10:01:02.500Z"),
        ("delete_pod", "succeeded", "DELETED", "2025-06-01T10:02:05.000Z")]
    deleting = doc["decisions"][1]
    assert (deleting["decision_id"], deleting["decision_reason"], deleting["trigger_seq"]) == (
        history.decision_ids[3], "too many replicas: deleting 2", 8)
    assert deleting["summary"]["deleting"] == ["web-m4q9z", "web-d5f8h"]
    assert [e["event_type"] for e in doc["events"]] == ["ADDED", "MODIFIED", "DELETED"]


def test_controller_since_until(kubus_audit: Audit) -> None:
    """--since as a duration counts back from now; --until as a timestamp."""
    code, out, _ = kubus_audit("controller", "default/agent", "--since", "2h", "--until", "2025-06-01T11:00:00Z")
    assert code == 0
    assert out.splitlines()[0] == ("DaemonSet default/agent: 1 sync, 3 actions between 2025-06-01T10:00:00.000Z "
                                   "and 2025-06-01T11:00:00.000Z")
    assert "Forbidden" in out and "MODIFIED #3" in out
    code, out, _ = kubus_audit("controller", "default/agent", "--since", "1h", "--json")
    doc = json.loads(out)
    assert [s["decision_reason"] for s in doc["syncs"]] == ["manage: 1 node needs a daemon pod",
                                                           "expectations satisfied: nothing to do"]
    assert [a["target_name"] for a in doc["actions"]] == ["agent-ccccc"]


def test_controller_known_but_quiet_in_the_range(kubus_audit: Audit) -> None:
    code, out, _ = kubus_audit("controller", "default/web", "--kind", "ReplicaSet", "--since", "30m")
    assert code == 0
    assert out.splitlines()[:2] == ["ReplicaSet default/web: 0 syncs, 0 actions since 2025-06-01T11:30:00.000Z; its "
                                    "latest decision is at", "  2025-06-01T10:02:01.500Z"]  # 120 columns
    code, out, _ = kubus_audit("controller", "default/web", "--kind", "ReplicaSet", "--since", "30m", "-o", "wide")
    assert out.splitlines()[0] == ("ReplicaSet default/web: 0 syncs, 0 actions since 2025-06-01T11:30:00.000Z; "
                                   "its latest decision is at 2025-06-01T10:02:01.500Z")


def test_failures_slowest_and_per_minute(kubus_audit: Audit) -> None:
    code, out, _ = kubus_audit("failures", "--since", "1d")
    assert code == 0
    assert out.splitlines()[1].endswith('  Forbidden  pods "agent-bbbbb" is f...'), out  # cut to 120 columns
    assert len(out.splitlines()[1]) == 120
    code, out, _ = kubus_audit("failures", "--since", "1d", "-o", "wide")
    assert code == 0
    assert out.splitlines()[1].split()[-12:] == ['"agent-bbbbb"', "is", "forbidden:", "exceeded", "quota:", "pods,",
                                                "requested:", "pods=1,", "used:", "pods=2,", "limited:", "pods=2"]
    code, out, _ = kubus_audit("failures", "--since", "1h")
    assert (code, out) == (0, "no failed actions since 2025-06-01T11:00:00.000Z\n")
    code, out, _ = kubus_audit("slowest", "--limit", "2")
    assert [line.split()[0] for line in out.splitlines()] == ["MS", "75.0", "40.0"]
    code, out, _ = kubus_audit("created-per-minute")
    assert out == ("MINUTE (UTC)      PODS\n"
                   "2025-06-01 10:00  1\n"
                   "2025-06-01 10:01  3\n"
                   "2025-06-01 11:30  1\n")
    code, out, _ = kubus_audit("created-per-minute", "--since", "2h", "--json")
    assert json.loads(out) == [{"minute": "2025-06-01 10:00", "pods": 1}, {"minute": "2025-06-01 10:01", "pods": 3},
                               {"minute": "2025-06-01 11:30", "pods": 1}]


@pytest.mark.parametrize(("argv", "message"), [
    (("pod", "default/web-nope"), "kubus audit pod: no pod default/web-nope in the audit trail: no action and no "
                                  "watch event names it"),
    (("controller", "default/nope"), "kubus audit controller: no ReplicaSet or DaemonSet default/nope in the audit "
                                     "trail: no decision and no watch event names it"),
    (("controller", "default/web", "--kind", "DaemonSet"), "kubus audit controller: no DaemonSet default/web in the "
                                                           "audit trail"),
])
def test_unknown_names_say_so(kubus_audit: Audit, argv: tuple[str, ...], message: str) -> None:
    code, out, err = kubus_audit(*argv)
    assert (code, out) == (3, "")
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.parametrize(("argv", "message"), [
    (("pod", "web-x7k2p"), "kubus audit pod: expected NAMESPACE/NAME, got 'web-x7k2p'\n"),
    (("failures", "--since", "yesterday"), "kubus audit failures: 'yesterday' is neither a duration (90s, 15m, 1h, "
                                           "7d) nor a timestamp (2025-06-01T10:00:00Z)\n"),
    (("slowest", "--since", "1h", "--until", "2h"), "kubus audit slowest: --since 1h is not before --until 2h\n"),
])
def test_bad_input(kubus_audit: Audit, argv: tuple[str, ...], message: str) -> None:
    assert kubus_audit(*argv) == (2, "", message)


def test_no_database_is_not_an_empty_trail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --data-dir without a kubus.db is a mistake to report, not a database to create."""
    args = build_parser().parse_args(["audit", "pod", "default/x", "--data-dir", str(tmp_path / "nowhere")])
    assert audit_command.run(args) == 2
    assert capsys.readouterr().err == (f"kubus audit pod: no kubus database at {tmp_path / 'nowhere' / 'kubus.db'}; "
                                       "check --data-dir / KUBUS_DATA_DIR, or set --db-url / KUBUS_DB_URL\n")
    assert not (tmp_path / "nowhere" / "kubus.db").exists()


def test_the_readme_examples(kubus_audit: Audit) -> None:
    """README.md's `kubus audit` examples are this scenario's output (as if it were 10:30 then)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## The audit trail"):]
    console = section[section.index("```console\n") + len("```console\n"):section.index("```\n\n")]
    examples = console.split("$ kubus audit ")[1:]
    assert len(examples) == 3
    for example in examples:
        command, _, shown = example.partition("\n")
        code, out, err = kubus_audit(*command.split(), now=datetime(2025, 6, 1, 10, 30, tzinfo=UTC))
        assert (code, err) == (0, "")
        assert out.rstrip("\n") == shown.rstrip("\n"), command
