"""`kubus shadow report` and the `--shadow` flags of `kubus up` and `kubus reconcile` (docs/shadow.md).

    kubus shadow report [--since 1d] [--until WHEN] [--controller NAMESPACE/NAME] [-o json|yaml|wide]

Per controller kind and per object: the decisions both sides took (agreed), those where the shadow picked
another member of upstream's tie class (equivalent), and the divergences: what only the shadow would have
done (kubus-only) and what only the acting controller did (upstream-only). For each divergence: the
window, its effect in words, the lineage (the shadow's decisions with their reasons and triggers, the
watch events that showed upstream's acts, the events of the namespace the shadow consumed in the window)
and the `kubus replay --explain` command that reproduces the shadow's side.

Exit status: 0 total agreement, 1 a divergence, 2 bad input or no database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from kube.times import Clock, parse_go_duration, utcnow
from reconciler.core.comparing import AGREED, EQUIVALENT, KUBUS_ONLY, UPSTREAM_ONLY, Timed, Window, compare, summary
from reconciler.core.controllers import DEFAULT_SHADOW_WINDOW
from reconciler.core.shadow import Act
from runtime import exitcodes, flags, printing

AGREEMENT, DIVERGENCE, BAD_INPUT = exitcodes.DONE, exitcodes.NO, exitcodes.NOT_STARTED



def add_shadow_arguments(p: argparse.ArgumentParser) -> None:
    """`--shadow` and `--shadow-window`, for `kubus up` and `kubus reconcile`."""
    # KUBUS_SHADOW and KUBUS_SHADOW_WINDOW come from runtime/flags.py's from_environment, as every flag's do
    p.add_argument("--shadow", action="store_true",
                   help="shadow mode: decide beside the acting controller (kube-controller-manager), act on nothing, "
                        "record every action as would-do and compare (docs/shadow.md). "
                        "`kubus up --shadow` runs no executor")
    p.add_argument("--shadow-window", type=_window, metavar="DURATION", default=_text(DEFAULT_SHADOW_WINDOW),
                   help="the comparison window: an owner's acts more than this apart are compared separately, and "
                        "a would-do act upstream has not matched within it is given up "
                        f"(default {_text(DEFAULT_SHADOW_WINDOW)})")


def _text(window: timedelta) -> str:
    return f"{window.total_seconds():g}s"


def _window(text: str) -> timedelta:
    try:
        window = parse_go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if window <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return window


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "shadow", help="compare a shadow kubus's would-do decisions with what the acting controller did",
        description="Shadow mode's report (docs/shadow.md).")
    commands = p.add_subparsers(dest="shadow_command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report", help="agreed, equivalent, kubus-only and upstream-only decisions, per controller and object",
        description="Compare, per owner and window, the shadow's would-do actions with the acts of the acting "
                    "controller the watch showed; for each divergence its lineage and the replay command.",
        epilog="Exit status: 0 total agreement, 1 a divergence, 2 bad input or no database.")
    report.add_argument("--since", default="1d", metavar="WHEN",
                        help="from this time: a duration ago (90s, 15m, 1h, 7d) or a UTC timestamp (default 1d)")
    report.add_argument("--until", metavar="WHEN", help="up to this time, same forms (default: now)")
    report.add_argument("--controller", metavar="NAMESPACE/NAME", help="only this ReplicaSet's or DaemonSet's")
    report.add_argument("--window", type=_window, metavar="DURATION",
                        help="the comparison window (default: the shadow's --shadow-window, as its last start "
                             f"recorded it; else {_text(DEFAULT_SHADOW_WINDOW)})")
    report.add_argument("--prefix", default=os.environ.get("KUBUS_PREFIX") or "kubus",
                        help="the shadow's --prefix, for the replay commands the report prints (env KUBUS_PREFIX)")
    report.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table",
                        help="table (default), wide (each divergence's acts and lineage too), json or yaml")
    flags.add_database(report.add_argument_group("database"))
    report.set_defaults(run=run)


class BadInput(Exception):
    pass


def run(args: argparse.Namespace, now: Clock = utcnow) -> int:
    from kubus.audit_command import BadQuestion, _check_database_exists, parse_window

    try:
        args.since = args.since or None
        window = parse_window(args, now())
        _check_database_exists(args.db_url, args.data_dir)
        report = asyncio.run(build(args, window.since, window.until, now()))
    except (BadQuestion, BadInput) as exc:
        print(f"kubus shadow report: {exc}", file=sys.stderr)
        return BAD_INPUT
    if args.output == "json":
        print(json.dumps(report, indent=2, default=str))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(json.loads(json.dumps(report, default=str)), sort_keys=False), end="")
    else:
        print(render(report, wide=args.output == "wide"), end="")
    return AGREEMENT if report["agreement"] else DIVERGENCE


async def build(args: argparse.Namespace, since: datetime | None, until: datetime | None,
                now: datetime) -> dict[str, Any]:
    from store.engine import DatabaseUnavailable, open_store

    try:
        store = await open_store(args.db_url, args.data_dir, statement_timeout=flags.statement_timeout(args))
    except DatabaseUnavailable as exc:
        raise BadInput(str(exc)) from None
    try:
        window = args.window or await _recorded_window(store) or DEFAULT_SHADOW_WINDOW
        controller = _controller_key(args.controller) if args.controller else None
        rows = await store.shadow_acts(since, until)
        acts = [Timed(r.act, r.at, r.id) for r in rows
                if controller is None or r.act.controller_key.split("/", 1)[1] == controller]
        decision_of = {r.id: r.decision_id for r in rows}
        judged = compare(acts, window, now)
        open_windows = len({(t[0].act.controller_key, t[0].at) for t in _groups(acts, window)}) - len(judged)
        divergences = []
        for w in judged:
            if w.diverges:
                divergences.append(await _divergence(store, w, decision_of, window, args))
        return {
            "window_seconds": window.total_seconds(),
            "since": since.isoformat() if since else None,
            "until": (until or now).isoformat(),
            "agreement": not divergences,
            "open_windows": open_windows,
            "controllers": summary(judged),
            "objects": _objects(judged),
            "equivalent": [{"controller": w.controller_key, "rule": rule, "kubus": _act(k.act, k.at),
                            "upstream": _act(u.act, u.at)} for w in judged for k, u, rule in w.equivalent],
            "divergences": divergences,
        }
    finally:
        await store.close()


def _groups(acts: list[Timed], window: timedelta) -> list[list[Timed]]:
    from reconciler.core.comparing import windows

    return windows(acts, window)


def _controller_key(text: str) -> str:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise BadInput(f"--controller: expected NAMESPACE/NAME, got {text!r}")
    return text


async def _recorded_window(store: Any) -> timedelta | None:
    """The --shadow-window of the shadow's last start, from its input log."""
    import sqlalchemy as sa

    from store.tables import reconciler_ticks as ticks

    async with store.engine.connect() as conn:
        state = (await conn.execute(sa.select(ticks.c.state).where(ticks.c.kind == "start")
                                    .order_by(ticks.c.id.desc()).limit(1))).scalar()
    if isinstance(state, str):
        state = json.loads(state)
    window = (state or {}).get("shadow_window_us")
    return None if window is None else timedelta(microseconds=int(window))


def _objects(judged: list[Window]) -> list[dict[str, Any]]:
    by: dict[str, Counter[str]] = {}
    for w in judged:
        counts = by.setdefault(w.controller_key, Counter())
        counts[AGREED] += len(w.agreed)
        counts[EQUIVALENT] += len(w.equivalent)
        counts[KUBUS_ONLY] += len(w.kubus_only)
        counts[UPSTREAM_ONLY] += len(w.upstream_only)
        counts["windows"] += 1
    return [{"controller": key, **{k: counts[k] for k in ("windows", AGREED, EQUIVALENT, KUBUS_ONLY, UPSTREAM_ONLY)}}
            for key, counts in sorted(by.items())]


def _act(act: Act, at: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {"side": act.side, "verb": act.verb, "target": act.target, "hash": act.hash, "seq": act.seq,
                           "at": at.isoformat(), "ref": act.ref}
    if act.fields:
        out["fields"] = act.fields
    if act.ties:
        out["ties"] = list(act.ties)
    return out


def effect(w: Window) -> str:
    """The divergence in words: what each side did of each verb in the window."""
    def tally(acts: list[Timed]) -> str:
        counts = Counter(t.act.verb for t in acts)
        return ", ".join(f"{verb} x{n}" for verb, n in sorted(counts.items())) or "nothing"

    ours = [k for k, _ in w.agreed] + [k for k, _, _ in w.equivalent] + w.kubus_only
    theirs = [u for _, u in w.agreed] + [u for _, u, _ in w.equivalent] + w.upstream_only
    parts = [f"{w.controller_key}: upstream did {tally(theirs)}; kubus would have done {tally(ours)}"]
    if w.upstream_only:
        parts.append("only upstream: " + "; ".join(_one(t.act) for t in w.upstream_only))
    if w.kubus_only:
        parts.append("only kubus: " + "; ".join(_one(t.act) for t in w.kubus_only))
    return ". ".join(parts)


def _one(act: Act) -> str:
    where = f" {act.target}" if act.target else ""
    revision = f" (revision {act.hash})" if act.hash else ""
    if act.verb in ("update_status", "keep_status"):
        return f"{act.verb} {json.dumps(act.fields, sort_keys=True)}"
    return f"{act.verb}{where}{revision}"


async def _divergence(store: Any, w: Window, decision_of: dict[int, int | None], window: timedelta,
                      args: argparse.Namespace) -> dict[str, Any]:
    kind, namespace, name = w.controller_key.split("/", 2)
    mine = [k for k, _ in w.agreed] + [k for k, _, _ in w.equivalent] + w.kubus_only
    decision_ids = sorted({d for t in mine if (d := decision_of.get(t.row)) is not None})
    msg_ids = [t.act.ref for t in w.upstream_only] + [u.act.ref for _, u in w.agreed]
    lineage = await store.shadow_lineage(decision_ids, msg_ids, namespace, w.start - window, w.end)
    seqs = [t.act.seq for t in mine + w.upstream_only if t.act.seq]
    replay = ["kubus", "replay", "--controller", f"{kind}/{namespace}/{name}", "--explain"]
    if seqs:
        replay += ["--since-seq", str(max(min(seqs) - 1, 1)), "--until-seq", str(max(seqs))]
    if args.db_url:
        replay += ["--db-url", "\"$KUBUS_DB_URL\""]
    elif args.data_dir != flags.DEFAULT_DATA_DIR:
        replay += ["--data-dir", args.data_dir]
    if args.prefix != "kubus":
        replay += ["--prefix", args.prefix]
    return {
        "controller": w.controller_key, "owner_uid": w.owner_uid,
        "window": {"start": w.start.isoformat(), "end": w.end.isoformat()},
        "effect": effect(w),
        "kubus_only": [_act(t.act, t.at) for t in w.kubus_only],
        "upstream_only": [_act(t.act, t.at) for t in w.upstream_only],
        "agreed": len(w.agreed), "equivalent": len(w.equivalent),
        "lineage": lineage,
        "replay": " ".join(replay),
    }


def render(report: dict[str, Any], wide: bool = False) -> str:
    lines = [f"window {report['window_seconds']:g}s, from {report['since'] or 'the beginning'} to {report['until']}"
             + (f" ({report['open_windows']} window(s) still open, not judged)" if report["open_windows"] else ""),
             ""]
    rows = [[kind, str(c[AGREED]), str(c[EQUIVALENT]), str(c[KUBUS_ONLY]), str(c[UPSTREAM_ONLY])]
            for kind, c in sorted(report["controllers"].items())]
    lines.extend(printing.columns([["CONTROLLER", "AGREED", "EQUIVALENT", "KUBUS-ONLY", "UPSTREAM-ONLY"], *rows]))
    lines.append("")
    rows = [[o["controller"], str(o["windows"]), str(o[AGREED]), str(o[EQUIVALENT]), str(o[KUBUS_ONLY]),
             str(o[UPSTREAM_ONLY])] for o in report["objects"]]
    lines.extend(printing.columns([["OBJECT", "WINDOWS", "AGREED", "EQUIVALENT", "KUBUS-ONLY", "UPSTREAM-ONLY"],
                                   *rows]))
    lines.append("")
    if report["agreement"]:
        lines.append("agreement: no divergence in the closed windows")
    for d in report["divergences"]:
        lines.append(f"DIVERGENCE {d['controller']} ({d['window']['start']} .. {d['window']['end']})")
        lines.append(f"  {d['effect']}")
        if wide:
            for side in ("kubus_only", "upstream_only"):
                for act in d[side]:
                    lines.append(f"  {side}: {json.dumps(act, sort_keys=True)}")
            for decision in d["lineage"]["decisions"]:
                lines.append(f"  decision {decision['decision_id']} at {decision['decided_at']} (seq "
                             f"{decision['stream_seq']}, trigger {decision['trigger']}): {decision['decision_reason']}")
            for event in d["lineage"]["upstream_events"]:
                lines.append(f"  upstream event #{event['stream_seq']} {event['event_type']} {event['kind']} "
                             f"{event['namespace']}/{event['name']} at {event['observed_at']}")
            lines.append(f"  events the shadow consumed in the window: {len(d['lineage']['events_seen'])}")
        lines.append(f"  reproduce kubus's side: {d['replay']}")
        lines.append("")
    return "\n".join(lines) + "\n"
