"""`kubus audit`: the audit trail's common questions from the shell (docs/audit.md has the schema
and the same questions in SQL).

    kubus audit pod NAMESPACE/NAME                       who created and deleted it, and why
    kubus audit controller NAMESPACE/NAME --since 1h     every decision and action of a ReplicaSet/DaemonSet
    kubus audit failures --since 1d                      failed actions and the API's error
    kubus audit slowest --limit 10                       the syncs that took longest
    kubus audit created-per-minute --since 1h            pods created per minute
    kubus audit timeline ds/NAME -n NAMESPACE            a rollout over time, per node (rs/NAME: per pod);
                                                         --html FILE: the same as a page, with each decision

Tables fitting 120 columns by default, every column in full with -o wide, -o json or -o yaml for machines
(--json, the earlier spelling, still works). Exit codes: 0 answered, 2 bad input or no database, 3 the pod or
controller asked about is not in the audit trail (2 for the timeline's unknown controller: it names one to draw).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from kube.times import Clock, utcnow
from runtime import exitcodes, flags, printing
from store import audit, retention
from store.audit import Row, TimeRange
from store.port import AuditPort
from store.urls import DB_FILE

FOUND, BAD_INPUT, UNKNOWN = exitcodes.DONE, exitcodes.NOT_STARTED, exitcodes.NO



class BadQuestion(Exception):
    """The question cannot be asked as given; the message says what to give instead."""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "audit", help="answer questions from the audit trail (decisions, actions, results, events)",
        description="Answer the common questions from kubus's audit trail in SQL: what happened to a pod, what a "
                    "controller did, which actions failed, which syncs were slow, how fast pods were created.")
    commands = p.add_subparsers(dest="audit_command", required=True, metavar="QUESTION")

    pod = commands.add_parser("pod", help="a pod's lifecycle: which decision created it, deleted it, and why",
                              description="Every action kubus took on the pod (its decision, controller, idempotency "
                                          "key, the executor's result and the watch event that confirmed it), the "
                                          "decisions behind them with their reasons and triggers, and the pod's "
                                          "watch events.")
    pod.add_argument("pod", metavar="NAMESPACE/NAME")
    _common(pod)

    ctl = commands.add_parser("controller", help="every decision and action of a ReplicaSet or DaemonSet",
                              description="The controller's syncs in the time range (trigger, reason, duration) and "
                                          "every action they took with its result.")
    ctl.add_argument("controller", metavar="NAMESPACE/NAME")
    ctl.add_argument("--kind", choices=audit.CONTROLLER_KINDS, help="ReplicaSet or DaemonSet (default: either)")
    _window(ctl)
    ctl.add_argument("--limit", type=_positive, default=500, help="at most this many syncs, the newest (default 500)")
    _common(ctl)

    fail = commands.add_parser("failures", help="failed actions and the API's error",
                               description="Actions an executor reported failed in the time range, with the API's "
                                           "code, reason and message.")
    _window(fail)
    fail.add_argument("--controller", metavar="KIND/NAMESPACE/NAME", help="only this controller's, e.g. "
                                                                          "ReplicaSet/default/web")
    fail.add_argument("--limit", type=_positive, default=100, help="at most this many, the newest (default 100)")
    _common(fail)

    slow = commands.add_parser("slowest", help="the syncs that took longest",
                               description="The controller syncs that took longest, with what triggered them.")
    _window(slow)
    slow.add_argument("--limit", type=_positive, default=10, help="how many (default 10)")
    _common(slow)

    per_minute = commands.add_parser("created-per-minute", help="pods created per minute",
                                     description="Pods the executors created, counted per minute (UTC).")
    _window(per_minute)
    _common(per_minute)

    line = commands.add_parser(
        "timeline", help="a rollout over time: per node (DaemonSet) or per pod (ReplicaSet), as a chart or a page",
        description="A DaemonSet's or ReplicaSet's pods over time, one row per node (DaemonSet) or per pod "
                    "(ReplicaSet): created, available, deleted, and the revision of each, with the decision behind "
                    "every change kubus made. A chart fitting 120 columns; -o json|yaml the model; --html FILE a "
                    "self-contained page (no network) showing each change's decision when hovered or clicked.",
        epilog="Exit status: 0 drawn, 2 bad input, an unreadable store, or a controller the audit trail does not "
               "know.")
    line.add_argument("controller", metavar="ds/NAME|rs/NAME",
                      help="the DaemonSet (ds/, daemonset/) or ReplicaSet (rs/, replicaset/)")
    line.add_argument("-n", "--namespace", default="default", help="its namespace (default: default)")
    _window(line)
    line.add_argument("--rows", type=_positive, default=40,
                      help="draw at most this many nodes or pods, then say how many more (default 40)")
    line.add_argument("--html", metavar="FILE", help="also write the timeline as a self-contained HTML page")
    printing.add_output(line, ("json", "yaml"), what="the chart")
    flags.add_database(line.add_argument_group("database"))
    p.set_defaults(run=run)


def _window(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="WHEN", help="from this time: a duration ago (90s, 15m, 1h, 7d) or a UTC "
                                                   "timestamp (2025-06-01T10:00:00Z); default: the beginning")
    p.add_argument("--until", metavar="WHEN", help="up to this time, same forms (default: now)")


def _common(p: argparse.ArgumentParser) -> None:
    printing.add_output(p, json_flag=True)  # --json: the earlier spelling of -o json
    flags.add_database(p.add_argument_group("database"))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# --- input ------------------------------------------------------------------------------------------
def parse_when(text: str, now: datetime) -> datetime:
    """A duration ago ('1h') or a timestamp ('2025-06-01T10:00:00Z'; without an offset it is UTC): as every --since."""
    try:
        return retention.parse_when(text, now)
    except ValueError as exc:
        raise BadQuestion(str(exc)) from None


def parse_window(args: argparse.Namespace, now: datetime) -> TimeRange:
    since = parse_when(args.since, now) if args.since else None
    until = parse_when(args.until, now) if args.until else None
    if since is not None and until is not None and since >= until:
        raise BadQuestion(f"--since {args.since} is not before --until {args.until}")
    return TimeRange(since, until)


KIND_PREFIXES = {"ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
                 "rs": "ReplicaSet", "replicaset": "ReplicaSet", "replicasets": "ReplicaSet"}


def split_kind(text: str) -> tuple[str, str]:
    """ds/NAME or rs/NAME (kubectl's short and long names, any case): (kind, name)."""
    prefix, sep, name = text.partition("/")
    kind = KIND_PREFIXES.get(prefix.lower())
    if not sep or not name or "/" in name:
        raise BadQuestion(f"expected ds/NAME or rs/NAME, got {text!r}")
    if kind is None:
        raise BadQuestion(f"{text!r}: unknown kind {prefix!r}; expected ds/NAME (a DaemonSet) or rs/NAME "
                          "(a ReplicaSet)")
    return kind, name


def split_name(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise BadQuestion(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


# --- running ----------------------------------------------------------------------------------------
def run(args: argparse.Namespace, now: Clock = utcnow) -> int:
    command = f"kubus audit {args.audit_command}"
    try:
        code, text = asyncio.run(_answer(args, now()))
    except BadQuestion as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return BAD_INPUT
    except Unknown as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return UNKNOWN
    print(text, end="" if text.endswith("\n") else "\n")
    return code


class Unknown(Exception):
    """What was asked about is not in the audit trail."""


async def _answer(args: argparse.Namespace, now: datetime) -> tuple[int, str]:
    question = args.audit_command
    if question == "timeline":
        return await _timeline(args, now)
    subject = split_name(args.pod if question == "pod" else args.controller) if question in ("pod", "controller") \
        else None
    window = parse_window(args, now) if question != "pod" else TimeRange()
    store = await _open(args)
    try:
        return await _ask(store, args, question, subject, window)
    except sa.exc.DBAPIError as exc:
        raise BadQuestion(f"querying {store.label} failed: {exc.orig}") from None
    finally:
        await store.close()


async def _ask(trail: AuditPort, args: argparse.Namespace, question: str, subject: tuple[str, str] | None,
               window: TimeRange) -> tuple[int, str]:
    output, wide = args.output, args.output == "wide"
    if question == "pod":
        assert subject is not None
        pod = await trail.pod_history(*subject)
        if pod is None:
            raise Unknown(f"no pod {args.pod} in the audit trail: no action and no watch event names it "
                          f"(in {trail.label})")
        return FOUND, render_data(pod_json(pod), output) if output in DATA else render_pod(pod, wide)
    if question == "controller":
        assert subject is not None
        ctl = await trail.controller_history(*subject, kind=args.kind, window=window, limit=args.limit)
        if ctl is None:
            what = args.kind or " or ".join(audit.CONTROLLER_KINDS)
            raise Unknown(f"no {what} {args.controller} in the audit trail: no decision and no watch event "
                          f"names it (in {trail.label})")
        return FOUND, render_data(controller_json(ctl), output) if output in DATA else render_controller(ctl, window,
                                                                                                        wide)
    if question == "failures":
        rows = await trail.failures(window, args.limit, args.controller)
        return FOUND, render_data(rows, output) if output in DATA else render_failures(rows, window, wide)
    if question == "slowest":
        rows = await trail.slowest(window, args.limit)
        return FOUND, render_data(rows, output) if output in DATA else render_slowest(rows, window, wide)
    rows = await trail.created_per_minute(window)
    return FOUND, render_data(rows, output) if output in DATA else render_per_minute(rows, window, wide)


DATA = ("json", "yaml")


async def _open(args: argparse.Namespace) -> AuditPort:
    """The store the audit commands read; one that is missing or does not answer is bad input (exit 2)."""
    from store.engine import DatabaseUnavailable, open_store

    _check_database_exists(args.db_url, args.data_dir)
    try:
        return await open_store(args.db_url, args.data_dir, statement_timeout=flags.statement_timeout(args))
    except DatabaseUnavailable as exc:
        raise BadQuestion(str(exc)) from None


async def _timeline(args: argparse.Namespace, now: datetime) -> tuple[int, str]:
    """`kubus audit timeline`: an unknown controller is bad input (2): it names what to draw, as a file would."""
    from kubus import timeline_view
    from store import timeline

    kind, name = split_kind(args.controller)
    window = parse_window(args, now)
    store = await _open(args)
    try:
        rows = await store.timeline_rows(kind, args.namespace, name, window.until)
    except sa.exc.DBAPIError as exc:
        raise BadQuestion(f"querying {store.label} failed: {exc.orig}") from None
    finally:
        await store.close()
    if rows is None:
        raise BadQuestion(f"no {kind} {args.namespace}/{name} in the audit trail: no decision and no watch event "
                          f"names it (in {store.label})")
    model = timeline.build(rows, window.since, window.until)
    if args.html:
        try:
            Path(args.html).write_text(timeline_view.render_html(model, args.rows), encoding="utf-8")
        except OSError as exc:
            raise BadQuestion(f"cannot write --html {args.html}: {exc.strerror or exc}") from None
    if args.output in DATA:
        return FOUND, render_data(timeline.as_data(model), args.output)
    text = timeline_view.render_chart(model, args.rows)
    if args.html:
        text += f"written: {args.html}\n"
    return FOUND, text


def _check_database_exists(url: str | None, data_dir: str) -> None:
    """An audit reads: a SQLite file that is not there is a wrong --data-dir, not an empty trail."""
    if url is None:
        path = Path(data_dir).expanduser() / DB_FILE
    else:
        try:
            parsed = sa.make_url(url)
        except sa.exc.ArgumentError:
            return  # open_store says what is wrong with it
        if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
            return
        path = Path(parsed.database)
    if not path.exists():
        raise BadQuestion(f"no kubus database at {path.absolute()}; check --data-dir / KUBUS_DATA_DIR, "
                       "or set --db-url / KUBUS_DB_URL")


# --- output -----------------------------------------------------------------------------------------
# Tables fit printing.WIDTH (120) columns: idempotency keys and the confirming event's time are shown with -o wide,
# and free text (triggers, reasons, messages) is cut to fit, in full with -o wide.
when = printing.when


def render_data(value: Any, output: str) -> str:
    return printing.dump(value, output)


def render_json(value: Any) -> str:
    return printing.dump(value, "json")


def table(heads: Sequence[printing.Column | str], rows: Sequence[Sequence[Any]], wide: bool = False) -> str:
    """printing.table's lines as one text."""
    return "\n".join(printing.table(heads, rows, wide=wide)) + "\n"


def _confirmed(a: Row, wide: bool) -> str:
    if a["confirmed_seq"] is None:
        return "-"
    by = f"{a['confirmed_by']} #{a['confirmed_seq']}"
    return f"{by} {when(a['confirmed_at'])}" if wide and a["confirmed_at"] is not None else by


def _trigger(s: Row) -> str:
    if s["trigger_seq"] is not None:
        where = f"{s['trigger_namespace']}/{s['trigger_name']}" if s["trigger_namespace"] else s["trigger_name"]
        return f"{s['trigger_kind']} {where} {s['trigger_type']} #{s['trigger_seq']}"
    return s["trigger"] or "-"  # a resync or a requeue


def _reason(s: Row) -> str:
    reason = s["decision_reason"] or "-"
    return f"{reason}; error: {s['decision_error']}" if s["decision_error"] else reason


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _range(window: TimeRange) -> str:
    if window.since and window.until:
        return f" between {when(window.since)} and {when(window.until)}"
    if window.since:
        return f" since {when(window.since)}"
    if window.until:
        return f" before {when(window.until)}"
    return ""


C = printing.Column
ACTION_HEADERS = (C("DECIDED"), C("DECISION"), C("ACTION"), C("TARGET"), C("KEY", wide=True), C("OUTCOME"), C("CODE"),
                  C("REASON", shrink=True), C("CONFIRMED"))


def _action_row(a: Row, wide: bool) -> list[Any]:
    target = f"{a['target_kind']} {a['target_name']}" if a["target_name"] else a["target_kind"]
    outcome = a["outcome"] or ("pending" if a["state"] == "pending" else "sent, no result yet")
    return [a["decided_at"], a["decision_id"], a["action"], target, a["idempotency_key"], outcome, a["code"],
            a["reason"], _confirmed(a, wide)]


SYNC_HEADERS = (C("DECIDED"), C("DECISION"), C("CONTROLLER"), C("TRIGGER", shrink=True), C("REASON", shrink=True),
                C("ACTIONS"), C("MS"))


def _sync_row(s: Row) -> list[Any]:
    return [s["decided_at"], s["decision_id"], s["controller_key"], _trigger(s), _reason(s), s["actions"],
            s["duration_ms"]]


def _headline(pod: audit.PodHistory) -> list[str]:
    by_id = {d["decision_id"]: d for d in pod.decisions}
    lines = []
    for a in pod.actions:
        if a["action"] not in ("create_pods", "delete_pod"):
            continue
        verb = "created" if a["action"] == "create_pods" else "deleted"
        if a["outcome"] != "succeeded":
            verb = f"{verb[:-1]}ion {a['outcome'] or 'requested'}"  # "creation failed", "deletion requested"
        d = by_id.get(a["decision_id"])
        why = f": {_reason(d)}" if d is not None else ""
        lines.append(f"{verb} by {a['controller_key']} (decision {a['decision_id']} at {when(a['decided_at'])}){why}")
    deleted = [e for e in pod.events if e["event_type"] in audit.DELETIONS]
    if deleted and not any(a["action"] == "delete_pod" and a["outcome"] == "succeeded" for a in pod.actions):
        lines.append(f"deleted at {when(deleted[-1]['observed_at'])} (watch event #{deleted[-1]['stream_seq']}), "
                     "not by a kubus action")
    if not lines:
        lines.append("no kubus action on it")
    return lines


def _lines(text: str, wide: bool) -> list[str]:
    """A headline: broken to fit printing.WIDTH, or whole with -o wide."""
    return [text] if wide else printing.wrap(text)


def render_pod(pod: audit.PodHistory, wide: bool = False) -> str:
    out = [*_lines(f"Pod {pod.namespace}/{pod.name}", wide),
           *(part for line in _headline(pod) for part in _lines(f"  {line}", wide)), ""]
    out.append("ACTIONS")
    out.append(table(ACTION_HEADERS, [_action_row(a, wide) for a in pod.actions], wide) if pod.actions
               else "(none)\n")
    out.append("DECISIONS")
    out.append(table(SYNC_HEADERS, [_sync_row(s) for s in pod.decisions], wide) if pod.decisions else "(none)\n")
    out.append("WATCH EVENTS")
    out.append(table(("SEQ", "TYPE", "UID", "RESOURCE VERSION", "OBSERVED"),
                     [[e["stream_seq"], e["event_type"], e["uid"], e["resource_version"], e["observed_at"]]
                      for e in pod.events], wide) if pod.events else "(none)\n")
    return "\n".join(out)


def pod_json(pod: audit.PodHistory) -> dict[str, Any]:
    return {"pod": f"{pod.namespace}/{pod.name}", "summary": _headline(pod), "actions": pod.actions,
            "decisions": pod.decisions, "events": pod.events}


def render_controller(ctl: audit.ControllerHistory, window: TimeRange, wide: bool = False) -> str:
    out = [f"{' or '.join(ctl.kinds)} {ctl.namespace}/{ctl.name}: {_count(len(ctl.syncs), 'sync')}, "
           f"{_count(len(ctl.actions), 'action')}{_range(window)}"]
    if ctl.truncated:
        out[0] += " (the newest shown: narrow --since/--until or raise --limit)"
    if not ctl.syncs:
        out[0] += f"; its latest decision is at {when(ctl.latest)}" if ctl.latest else "; it was never synced"
    out[0:1] = _lines(out[0], wide)
    out.append("")
    out.append("SYNCS")
    out.append(table(SYNC_HEADERS, [_sync_row(s) for s in ctl.syncs], wide) if ctl.syncs else "(none)\n")
    out.append("ACTIONS")
    out.append(table(ACTION_HEADERS, [_action_row(a, wide) for a in ctl.actions], wide) if ctl.actions
               else "(none)\n")
    return "\n".join(out)


def controller_json(ctl: audit.ControllerHistory) -> dict[str, Any]:
    return {"controller": f"{ctl.namespace}/{ctl.name}", "kinds": ctl.kinds, "truncated": ctl.truncated,
            "latest_decision_at": ctl.latest, "syncs": ctl.syncs, "actions": ctl.actions}


FAILURE_HEADERS = (C("FINISHED"), C("CONTROLLER"), C("ACTION"), C("TARGET"), C("KEY", wide=True), C("CODE"),
                   C("REASON"), C("MESSAGE", shrink=True))


def render_failures(rows: list[Row], window: TimeRange, wide: bool = False) -> str:
    if not rows:
        return f"no failed actions{_range(window)}\n"
    return table(FAILURE_HEADERS, [[r["finished_at"], r["controller_key"], r["action"], r["target_name"] or
                                    r["target_kind"], r["idempotency_key"], r["code"], r["reason"], r["message"]]
                                   for r in rows], wide)


SLOWEST_HEADERS = (C("MS"), C("DECIDED"), C("DECISION"), C("CONTROLLER"), C("TRIGGER", shrink=True),
                   C("REASON", shrink=True), C("ACTIONS"))


def render_slowest(rows: list[Row], window: TimeRange, wide: bool = False) -> str:
    if not rows:
        return f"no syncs{_range(window)}\n"
    return table(SLOWEST_HEADERS, [[r["duration_ms"], r["decided_at"], r["decision_id"], r["controller_key"],
                                    _trigger(r), _reason(r), r["actions"]] for r in rows], wide)


def render_per_minute(rows: list[Row], window: TimeRange, wide: bool = False) -> str:
    if not rows:
        return f"no pods created{_range(window)}\n"
    return table(("MINUTE (UTC)", "PODS"), [[r["minute"], r["pods"]] for r in rows], wide)
