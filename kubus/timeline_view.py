"""`kubus audit timeline`'s pictures of a store.timeline.Timeline: a chart for the terminal (printing.WIDTH columns)
and a self-contained HTML page (inline CSS, SVG and script; it fetches nothing), with the decision behind each change.

Every string from the cluster or the store (names, reasons, triggers, keys) is escaped where it goes: the page's text
and attributes by html.escape, its script reads them from data-* attributes and writes them as text only.
"""

from __future__ import annotations

import html
import itertools
from datetime import datetime, timedelta
from typing import Any

from runtime import printing
from store.timeline import (
    AVAILABLE,
    CREATED,
    DELETED,
    DELETING,
    GONE,
    NO_REVISION,
    NO_REVISION_AVAILABLE,
    NOT_YET,
    UNAVAILABLE,
    Change,
    Lane,
    Revision,
    Timeline,
    when_text,
)

LEGEND = (f"{NOT_YET} no pod yet   a b c... a pod of that revision, not available   A B C... available   "
          f"{GONE} deleted, none since")
MAX_LABEL = 32  # a lane's name is cut to this in the chart
TICK_EVERY = 24  # columns between the time axis's labels


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _title(t: Timeline) -> str:
    pods = _count(t.pods, "pod")
    return f"{t.kind} {t.namespace}/{t.name}: {_count(len(t.lanes), 'node')}, {pods}" if t.per == "node" else \
        f"{t.kind} {t.namespace}/{t.name}: {pods}"


def _revisions_line(t: Timeline) -> str:
    parts = [f"{r.letter} = {_revision_name(r)}" for r in t.revisions]
    return "revisions: " + (", ".join(parts) if parts else "none seen")


def _revision_name(r: Revision) -> str:
    if not r.hash:
        return "its pod template (no pod-template-hash label)"
    return f"revision {r.number} {r.hash}" if r.number else f"hash {r.hash}"


def _unlabelled(t: Timeline) -> bool:
    return any(c.revision == NO_REVISION for lane in t.lanes for c in lane.changes)


def _acts(t: Timeline) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = {}
    for _, c in t.changes():
        if c.decision is not None:
            per = counts.setdefault(c.decision, {})
            per[c.what] = per.get(c.what, 0) + 1
    return counts


def _acts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))


def _time_label(value: datetime, span: timedelta) -> str:
    text = when_text(value)  # 2025-06-01T10:00:00.000Z
    return text[11:23] if span < timedelta(minutes=1) else text[11:19]


def render_chart(t: Timeline, rows: int, width: int = printing.WIDTH) -> str:
    """The terminal chart: one row per lane (the first `rows`), time across, a glyph per state; a legend, the time
    axis, and the decisions behind the changes."""
    out = printing.wrap(_title(t), width)
    if t.start is None or t.end is None or not t.lanes:
        out.append("nothing to draw: no pod of it changed in the time range")
        return "\n".join(out) + "\n"
    span = t.end - t.start
    label_w = min(max(len(lane.name) for lane in t.lanes), MAX_LABEL)
    columns = max(width - label_w - 2, 10)
    step = span / columns if span > timedelta(0) else timedelta(0)
    out += printing.wrap(f"from {when_text(t.start)} to {when_text(t.end)}, {_duration(step)} a column", width)
    out += printing.wrap(_revisions_line(t), width)
    out += printing.wrap(LEGEND + (f"   {NO_REVISION} {NO_REVISION_AVAILABLE} a pod of no known revision, not "
                                   "available and available" if _unlabelled(t) else ""), width)
    out.append("")
    shown = t.lanes[:rows]
    for lane in shown:
        out.append(f"{printing.fit(lane.name, label_w).ljust(label_w)}  {_row(lane, t.start, span, columns)}")
    if len(t.lanes) > len(shown):
        out.append(f"... and {len(t.lanes) - len(shown)} more (--rows {len(t.lanes)} shows every one)")
    out += _axis(t.start, step, columns, label_w, span)
    counts = _acts(t)
    if t.decisions:
        out += ["", "DECISIONS (each change and its decision: --html FILE or -o json)"]
        C = printing.Column
        out += printing.table(
            (C("DECIDED"), C("DECISION"), C("TRIGGER", shrink=True), C("REASON", shrink=True), C("CHANGES")),
            [[d.at, d.id, d.trigger, d.reason, _acts_text(counts.get(d.id, {}))] for d in t.decisions.values()],
            width=width)
        first = next(iter(t.decisions.values()))
        out += printing.wrap(f"replay one: {first.replay}", width)
    return "\n".join(out) + "\n"


def _duration(step: timedelta) -> str:
    seconds = step.total_seconds()
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.1f}s"


def _row(lane: Lane, start: datetime, span: timedelta, columns: int) -> str:
    """A glyph per column: the lane's state at the column's end (the last column's: the window's end, exactly)."""
    return "".join(lane.glyph_at(start + span * (i + 1) / columns) for i in range(columns))


def _axis(start: datetime, step: timedelta, columns: int, label_w: int, span: timedelta) -> list[str]:
    ticks = [" "] * columns
    labels = [" "] * (columns + 16)
    for i in range(0, columns, TICK_EVERY):
        ticks[i] = "|"
        text = _time_label(start + step * i, span)
        if i + len(text) <= columns:
            labels[i:i + len(text)] = text
    pad = " " * (label_w + 2)
    return [(pad + "".join(ticks)).rstrip(), (pad + "".join(labels)).rstrip()]


# --- HTML -------------------------------------------------------------------------------------------------------
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
LABEL_PX, CHART_PX, ROW_PX, TOP_PX = 180, 900, 20, 10
WHAT = {CREATED: "created", AVAILABLE: "became available", UNAVAILABLE: "became unavailable",
        DELETING: "deletion began", DELETED: "deleted"}

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 4px}
.sub{color:#555;margin:0 0 10px}
.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:middle;border:1px solid #888}
svg{display:block;margin:8px 0}
svg text{font:12px monospace;fill:#222}
.mark{cursor:pointer;stroke:#000;stroke-width:1}
.mark.kubus{fill:#000}
.mark.seen{fill:#fff}
.mark:hover,.mark.on{stroke-width:3}
#detail{border:1px solid #bbb;background:#f7f7f7;padding:8px 12px;min-height:60px;max-width:1080px}
#detail dt{font-weight:bold;float:left;width:90px;clear:left}
#detail dd{margin-left:100px}
#detail code{white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;margin-top:10px}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td code{font-size:12px}
"""

_SCRIPT = """
(function(){
  var fields=['lane','what','pod','at','seq','decision','reason','trigger','action','replay'];
  function show(m){
    document.querySelectorAll('.mark.on').forEach(function(o){o.classList.remove('on');});
    m.classList.add('on');
    fields.forEach(function(f){document.getElementById('d-'+f).textContent=m.getAttribute('data-'+f)||'-';});
  }
  document.querySelectorAll('.mark').forEach(function(m){
    m.addEventListener('click',function(){show(m);});
    m.addEventListener('mouseenter',function(){show(m);});
  });
  var first=document.querySelector('.mark.kubus')||document.querySelector('.mark');
  if(first){show(first);}
  document.body.setAttribute('data-ready','yes');
})();
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _color(letter: str, letters: list[str]) -> str:
    return PALETTE[letters.index(letter) % len(PALETTE)] if letter in letters else "#999"


def _x(t: Timeline, when: datetime) -> float:
    assert t.start is not None and t.end is not None
    span = (t.end - t.start).total_seconds()
    offset = (when - t.start).total_seconds()
    return LABEL_PX + (CHART_PX * offset / span if span > 0 else 0.0)


def _segments(t: Timeline, lane: Lane) -> list[tuple[datetime, datetime, str]]:
    """The lane's states through the window: (from, to, glyph), one per stretch of the same glyph."""
    assert t.start is not None and t.end is not None
    cuts = sorted({t.start, t.end, *(c.at for c in lane.changes if t.start < c.at < t.end)})
    found: list[tuple[datetime, datetime, str]] = []
    for a, b in itertools.pairwise(cuts):
        glyph = lane.glyph_at(a)
        if found and found[-1][2] == glyph:
            found[-1] = (found[-1][0], b, glyph)
        else:
            found.append((a, b, glyph))
    return found


def _mark(t: Timeline, lane: Lane, c: Change, y: float) -> str:
    d = t.decisions.get(c.decision) if c.decision is not None else None
    attrs = {"lane": lane.name, "what": f"{c.pod} {WHAT.get(c.what, c.what)} (revision {c.revision})",
             "pod": f"{c.pod} (uid {c.uid})", "at": when_text(c.at),
             "seq": f"watch event #{c.seq}" if c.seq is not None else "no event: Ready + minReadySeconds"}
    title = f"{lane.name}: {c.pod} {WHAT.get(c.what, c.what)} at {when_text(c.at)}"
    if d is not None:
        attrs.update({"decision": f"{d.id} at {when_text(d.at)} ({d.correlation_id})", "reason": d.reason,
                      "trigger": d.trigger, "action": f"{c.action} {c.key} ({c.outcome or 'no result yet'})",
                      "replay": d.replay})
        title += f"; decision {d.id}: {d.reason}"
    else:
        attrs.update({"decision": "none: not a kubus act (the kubelet, a user, the garbage collector)"})
    data = " ".join(f'data-{k}="{_e(v)}"' for k, v in attrs.items())
    x = _x(t, c.at)
    cls = "mark kubus" if d is not None else "mark seen"
    shape = (f'<circle class="{cls}" cx="{x:.1f}" cy="{y + ROW_PX / 2:.1f}" r="4" {data}>' if c.what != DELETED
             else f'<rect class="{cls}" x="{x - 4:.1f}" y="{y + ROW_PX / 2 - 4:.1f}" width="8" height="8" {data}>')
    return f'{shape}<title>{_e(title)}</title></{"circle" if c.what != DELETED else "rect"}>'


def render_html(t: Timeline, rows: int) -> str:
    """One self-contained page: the timeline as SVG, a panel showing the decision behind the change hovered or
    clicked, and every decision in a table."""
    letters = [r.letter for r in t.revisions]
    title = _title(t)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    if t.start is None or t.end is None or not t.lanes:
        parts.append('<p class="sub">nothing to draw: no pod of it changed in the time range</p></body></html>')
        return "\n".join(parts) + "\n"
    parts.append(f'<p class="sub">from {_e(when_text(t.start))} to {_e(when_text(t.end))}; one row per {t.per}; '
                 "a dot is a change (black: kubus acted, its decision below when hovered or clicked; white: seen "
                 "in the watch only), a square a deletion</p>")
    legend = ['<p class="legend">']
    for r in t.revisions:
        color = _color(r.letter, letters)
        legend.append(f'<span><i class="sw" style="background:{color};opacity:.35"></i>'
                      f'<i class="sw" style="background:{color}"></i>{_e(r.letter)}: {_e(_revision_name(r))} '
                      "(pale: not available yet, solid: available)</span>")
    if _unlabelled(t):
        legend.append('<span><i class="sw" style="background:#999"></i>a pod of no known revision</span>')
    legend.append('<span><i class="sw" style="background:#e6e6e6"></i>deleted, none since</span></p>')
    parts.append("".join(legend))
    shown = t.lanes[:rows]
    height = TOP_PX + ROW_PX * len(shown) + 40
    svg = [f'<svg id="timeline" width="{LABEL_PX + CHART_PX + 20}" height="{height}" role="img" '
           f'aria-label="{_e(title)}">']
    for i, lane in enumerate(shown):
        y = TOP_PX + ROW_PX * i
        svg.append(f'<g class="lane" data-name="{_e(lane.name)}">')
        svg.append(f'<text x="4" y="{y + 14}">{_e(printing.fit(lane.name, 22))}</text>')
        for a, b, glyph in _segments(t, lane):
            if glyph == NOT_YET:
                continue
            x0, x1 = _x(t, a), _x(t, b)
            if glyph == GONE:
                fill, opacity = "#e6e6e6", "1"
            else:
                letter = NO_REVISION if glyph == NO_REVISION_AVAILABLE else glyph.lower()
                available = glyph.isupper() or glyph == NO_REVISION_AVAILABLE
                fill, opacity = _color(letter, letters), ("1" if available else ".35")
            svg.append(f'<rect class="state" x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 1):.1f}" '
                       f'height="{ROW_PX - 6}" fill="{fill}" fill-opacity="{opacity}"><title>{_e(lane.name)}: '
                       f'{_e(glyph)} from {_e(when_text(a))} to {_e(when_text(b))}</title></rect>')
        for c in lane.changes:
            if t.within(c.at):
                svg.append(_mark(t, lane, c, y))
        svg.append("</g>")
    axis_y = TOP_PX + ROW_PX * len(shown) + 4
    svg.append(f'<line x1="{LABEL_PX}" y1="{axis_y}" x2="{LABEL_PX + CHART_PX}" y2="{axis_y}" stroke="#444"/>')
    span = t.end - t.start
    for k in range(6):
        at = t.start + span * k / 5
        x = _x(t, at)
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        svg.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="#444"/>'
                   f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="{anchor}">{_e(_time_label(at, span))}</text>')
    svg.append("</svg>")
    parts.append("".join(svg))
    if len(t.lanes) > len(shown):
        parts.append(f'<p class="sub">... and {len(t.lanes) - len(shown)} more {t.per}s '
                     f"(--rows {len(t.lanes)} draws every one)</p>")
    parts.append('<dl id="detail">' + "".join(f'<dt>{f}</dt><dd><code id="d-{f}">-</code></dd>' for f in (
        "lane", "what", "pod", "at", "seq", "decision", "reason", "trigger", "action", "replay")) + "</dl>")
    if t.decisions:
        counts = _acts(t)
        parts.append("<table><thead><tr><th>decision</th><th>decided</th><th>trigger</th><th>reason</th>"
                     "<th>changes</th><th>replay it</th></tr></thead><tbody>")
        for d in t.decisions.values():
            parts.append(f'<tr id="decision-{d.id}"><td>{d.id}</td><td>{_e(when_text(d.at))}</td>'
                         f"<td>{_e(d.trigger)}</td><td>{_e(d.reason)}</td>"
                         f"<td>{_e(_acts_text(counts.get(d.id, {})))}</td><td><code>{_e(d.replay)}</code></td></tr>")
        parts.append("</tbody></table>")
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"
