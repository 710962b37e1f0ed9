"""What `kubus replay` prints: the decisions (one line each, or explained), the first divergence, a summary.

`Replay` drives an `Engine` over bundles from any source, decides what falls in the window and under
`--controller`, and writes text (or JSON lines with ``--format json``) to a stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from kube.times import format_micro_time
from reconciler.core.controllers import Decided
from replay import explain as explaining
from replay.bundles import Bundle
from replay.diff import normalized
from replay.engine import Engine, TickOutcome
from replay.source import Window, WindowTracker
from replay.whatif import NamedObject, WhatIf
from runtime import printing
from runtime.exitcodes import NO as EXIT_NO


@dataclass
class ReplayOptions:
    controller: NamedObject | None = None
    explain: bool = False
    diff: bool = False
    decisions: bool = False  # print every decision (the controller's are printed anyway)
    window: Window = field(default_factory=Window)
    what_if: WhatIf | None = None
    format: str = "text"


def controller_keys(target: NamedObject) -> set[str]:
    return {f"{kind}/{target.namespace}/{target.name}" for kind in target.kinds}


class Replay:
    """The engine, the window, the filter and the printing, for one run of `kubus replay`."""

    def __init__(self, options: ReplayOptions, out: TextIO):
        self.options = options
        self.out = out
        self.keys = controller_keys(options.controller) if options.controller is not None else None
        self.engine = Engine(what_if=options.what_if or None, compare=options.diff, on_tick=self._observe)
        self.tracker = WindowTracker(options.window)
        self.reporting = False
        self.printed = 0
        self.matched = 0  # decisions of the --controller (in the window)
        self.without_decisions = False  # a batch came without its recorded decisions

    @property
    def printing(self) -> bool:
        o = self.options
        return self.keys is not None or o.explain or o.decisions or bool(o.what_if)

    @property
    def plain_diff(self) -> bool:
        """`--diff` of the whole history with nothing printed per decision: what replay.parallel replays on two
        cores (the first divergence and the summary are the same)."""
        o = self.options
        return o.diff and not self.printing and not o.window

    def feed(self, bundle: Bundle) -> bool:
        """Replays one bundle; False once the replay is over (past the window, or diverged under --diff)."""
        tick = bundle.tick
        if tick.kind == "start" and self.engine.controllers is None and tick.state:
            # a replay from a restart: the events before it were consumed, the window counts from there
            positions = tick.state.get("positions") or {}
            self.tracker.position = max((int(s) for s in positions.values()), default=0)
        self.without_decisions |= bundle.decisions is None and tick.kind == "batch"
        placed = self.tracker.place(tick)
        if placed > 0:
            return False
        self.reporting = placed == 0
        self.engine.feed(bundle)
        return not (self.options.diff and self.engine.divergence is not None)

    def _observe(self, outcome: TickOutcome) -> None:
        if not self.reporting or not self.printing:
            return
        for index, decided in enumerate(outcome.decisions):
            if self.keys is not None and decided.controller_key not in self.keys:
                continue
            self.matched += 1
            self._print_decision(outcome, index, decided)

    # --- printing ---------------------------------------------------------------------------------------
    def _print_decision(self, outcome: TickOutcome, index: int, decided: Decided) -> None:
        tick = outcome.bundle.tick
        at = tick.at
        details = explaining.explain(outcome.engine.cache, decided, at) if self.options.explain else None
        self.printed += 1
        if self.options.format in ("json", "yaml"):
            self._json({"tick": tick.id, "at": format_micro_time(at), "index": index,
                        "controller": decided.controller_key, "correlation_id": decided.correlation_id,
                        "trigger": decided.trigger, "summary": normalized(decided.summary),
                        "actions": sorted(a.key for a in decided.actions),
                        **({"explain": details} if details is not None else {})})
            return
        head = f"tick {tick.id}  {format_micro_time(at)}  {decided.controller_key}"
        self.out.write(f"{head}  {one_line(decided)}\n")
        if details is not None:
            for line in explain_lines(details):
                self.out.write(f"    {line}\n")

    def _json(self, value: Any) -> None:
        """A record: a JSON line, or with format "yaml" a YAML document."""
        line = json.dumps(value, separators=(",", ":"), default=str)
        if self.options.format == "yaml":
            import yaml  # type: ignore[import-untyped]

            self.out.write("---\n" + yaml.safe_dump(json.loads(line), sort_keys=False, allow_unicode=True))
        else:
            self.out.write(line + "\n")

    def finish(self, source: str) -> int:
        """The summary (and the divergence); the exit code: 1 when --diff found a divergence."""
        stats = self.engine.stats
        rate = stats.events / stats.seconds if stats.seconds else 0.0
        divergence = self.engine.divergence
        if self.options.format in ("json", "yaml"):
            self._json({"summary": {
                "source": source, "ticks": stats.ticks, "starts": stats.starts, "events": stats.events,
                "bootstrap_events": stats.state, "results": stats.results, "decisions": stats.decisions,
                "printed": self.printed, "seconds": round(stats.seconds, 6), "events_per_second": round(rate),
                "compared": stats.compared if self.options.diff else None,
                "divergence": None if divergence is None else {
                    "tick": divergence.tick, "at": format_micro_time(divergence.at), "line": divergence.line,
                    "index": divergence.index, "controller": divergence.controller_key,
                    "correlation_id": divergence.correlation_id, "what": divergence.what}}})
        else:
            w = self.out.write
            if self.options.what_if:
                w("what if: " + "; ".join(self.options.what_if.describe()) + "\n")
            if self.keys is not None and not self.matched:
                w(f"no decision of {self.options.controller} in the replayed ticks\n")
            w(f"replayed {stats.events:,} events ({stats.state:,} more at {stats.starts} start(s)) and "
              f"{stats.results:,} results in {stats.ticks:,} ticks from {source}: {stats.decisions:,} decisions "
              f"in {stats.seconds:.2f} s ({rate:,.0f} events/s)\n")
            if self.options.diff:
                if divergence is None and self.without_decisions:
                    w("nothing to compare with: the source holds no recorded decisions (exported with "
                      "--no-decisions?)\n")
                elif divergence is None:
                    w(f"no divergence: {stats.compared:,} recorded decisions, the replayed ones identical\n")
                else:
                    w(divergence.describe() + "\n")
                    if divergence.recorded is not None and divergence.replayed is not None:
                        for side in ("recorded", "replayed"):
                            fields = getattr(divergence, side)
                            w(f"  {side}: {fields['correlation_id']} {short_summary(fields['summary'])}; "
                              f"actions {[a[0] for a in fields['actions']]}\n")
        self.out.flush()
        if self.options.diff and divergence is None and self.without_decisions:
            return 2
        return EXIT_NO if self.options.diff and divergence is not None else 0


# --- text ---------------------------------------------------------------------------------------------------
def one_line(decided: Decided) -> str:
    s = decided.summary
    parts = [str(s.get("reason") or s.get("error") or "")]
    creates = s.get("creates")
    if isinstance(creates, list) and creates:
        parts.append(f"create on {', '.join(creates)}")
    elif isinstance(creates, int) and creates:
        parts.append(f"create {creates}")
    if s.get("deletes"):
        parts.append(f"delete {', '.join(s['deletes'])}")
    rollout = s.get("rollout")
    if isinstance(rollout, dict):
        parts.append(f"rollout maxUnavailable {rollout.get('max_unavailable')} maxSurge {rollout.get('max_surge')}"
                     + (f" deleting {', '.join(rollout['deleting'])}" if rollout.get("deleting") else ""))
    elif isinstance(rollout, str):
        parts.append(f"rollout: {rollout}")
    if s.get("status_written"):
        parts.append("status written")
    if s.get("error"):
        parts.append(f"error: {s['error']}")
    return "; ".join(p for p in parts if p) + f"  [{len(decided.actions)} actions]"


def short_summary(summary: dict[str, Any]) -> str:
    keep = {k: summary[k] for k in ("reason", "creates", "deletes", "rollout", "diff") if k in summary}
    return json.dumps(keep, separators=(",", ":"))[:300]


def _yes(value: Any) -> str:
    return "yes" if value else "no"


def explain_lines(details: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "nodes" in details and isinstance(details["nodes"], list):
        lines.append(f"reason: {details.get('reason')}; revision {details.get('hash')}, generation "
                     f"{details.get('generation')}, {details.get('strategy') or 'no strategy'} (maxUnavailable "
                     f"{details.get('max_unavailable')}, maxSurge {details.get('max_surge')})")
        rows: list[tuple[str, ...]] = [("node", "shouldRun", "shouldContinueRunning", "pods", "action", "why")]
        for n in details["nodes"]:
            pods = ", ".join(f"{p['name']} ({p['phase']}{', Ready' if p['ready'] else ''}"
                             f"{', deleting' if p.get('deleting') else ''}, {p['hash'] or 'no hash'})"
                             for p in n["pods"]) or "-"
            rows.append((n["node"], _yes(n["should_run"]), _yes(n["should_continue_running"]), pods,
                         n["action"] or "-", n["why"]))
        lines.extend(printing.columns(rows))
        for key in ("rollout", "nodes_needing_pods", "deferred_nodes", "deferred_deletes", "create_error",
                    "revisions_created", "revisions_deleted", "warnings"):
            if key in details:
                lines.append(f"{key.replace('_', ' ')}: {json.dumps(details[key])}")
        return lines
    if "replicas" in details:
        diff = details.get("diff", 0)
        allowed = "satisfied: manageReplicas ran" if details.get("needs_sync") else "pending: status only"
        lines.append(f"replicas {details['replicas']}, active {details.get('active')}: diff {diff:+d}; "
                     f"expectations {allowed}")
        lines.append(f"reason: {details.get('reason')}")
        if details.get("manage_error"):
            lines.append(f"last round's error: {details['manage_error']}")
        ranking = details.get("ranking")
        if ranking:
            lines.append("ranking (upstream's ActivePodsWithRanks, first = deleted first):")
            ranked: list[tuple[str, ...]] = [
                ("#", "pod", "", "node", "phase", "ready", "cost", "rank", "ready since", "restarts", "created",
                 "uid")]
            for r in ranking:
                ranked.append((str(r["position"]), r["pod"], "DELETE" if r["deleted"] else "keep", r["node"] or "-",
                               r["phase"], _yes(r["ready"]), str(r["deletion_cost"]), str(r["rank"]),
                               r["ready_since"] or "-", str(r["restarts"]), r["created"] or "-", r["uid"][:8]))
            lines.extend(printing.columns(ranked))
            lines.append("(the columns in the order the rules apply; pods equal in all of them go by UID)")
        return lines
    lines.append(f"reason: {details.get('reason')}")
    return lines


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """A duration ago (1h, 30m, 2d) or an RFC 3339 time, e.g. 2026-11-23T05:12:03Z (without an offset it is UTC), as
    every --since takes (store.retention.parse_when)."""
    from store.retention import parse_when as when

    return when(text, now or datetime.now(UTC))
