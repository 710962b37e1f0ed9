"""`kubus audit timeline`: the scenario's DaemonSet and ReplicaSet as a chart, as data and as a page (SQLite and
PostgreSQL); its errors; a page that fetches nothing and escapes what the cluster wrote; and the page in a real
browser (headless Chromium: .ci/run installs it)."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from kubus import audit_command
from kubus.cli import build_parser
from messages import codec
from messages.actions import CreatePods
from reconciler.core.audit_targets import targets_of
from runtime import printing
from store.decisions import Decision
from store.engine import Store
from store.outbox import OutboxRow
from store.results import ResultRow
from tests.audit.conftest import Audit
from tests.audit.scenario import NS, RS, Scenario, _event, _pod, at, pod_facts


def test_a_replicasets_pods(kubus_audit: Audit, history: Scenario) -> None:
    """One row per pod: created at 10:01:02.5, two deleted at 10:02:05; the decisions behind them."""
    code, out, err = kubus_audit("timeline", "rs/web")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:4] == [
        "ReplicaSet default/web: 3 pods",
        "from 2025-06-01T10:01:02.500Z to 2025-06-01T10:02:05.000Z, 573ms a column",
        "revisions: a = its pod template (no pod-template-hash label)",
        ". no pod yet   a b c... a pod of that revision, not available   A B C... available   x deleted, none since"]
    rows = {line.split()[0]: line.split()[1] for line in lines[5:8]}
    assert set(rows) == {"web-x7k2p", "web-m4q9z", "web-d5f8h"}
    assert rows["web-x7k2p"] == "a" * 109  # never Ready in the scenario
    assert re.fullmatch(r"a{100,}x", rows["web-d5f8h"]) and re.fullmatch(r"a{100,}x", rows["web-m4q9z"])
    assert all(len(line) <= printing.WIDTH for line in lines)
    decisions = lines[lines.index("DECISIONS (each change and its decision: --html FILE or -o json)") + 2:]
    assert [line.split()[:2] for line in decisions[:2]] == [
        ["2025-06-01T10:01:01.000Z", str(history.decision_ids[2])], ["2025-06-01T10:02:00.500Z",
                                                                      str(history.decision_ids[3])]]
    assert "too many replicas: deleting 2  1 deleted, 1 deleting" in decisions[1]
    assert decisions[2] == ("replay one: kubus replay --controller ReplicaSet/default/web --explain --since "
                            "2025-06-01T10:01:01.000Z --until")


def test_a_daemonset_as_data(kubus_audit: Audit, history: Scenario) -> None:
    code, out, _ = kubus_audit("timeline", "ds/agent", "-n", "default", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["controller"], doc["per"], doc["pods"]) == ("DaemonSet/default/agent", "node", 2)
    assert doc["revisions"] == [{"letter": "a", "hash": "5d8f", "number": None}]
    assert [(lane["name"], [(c["what"], c["pod"], c["decision"], c["action"], c["outcome"]) for c in lane["changes"]])
            for lane in doc["lanes"]] == [
        ("node-1", [("created", "agent-aaaaa", history.decision_ids[1], "create_pods", "succeeded")]),
        ("node-3", [("created", "agent-ccccc", history.decision_ids[4], "create_pods", "succeeded")])]
    assert [(d["id"], d["reason"], d["trigger"]) for d in doc["decisions"]] == [
        (history.decision_ids[1], "manage: 2 nodes need a daemon pod (2 creates, 0 deletes)",
         "DaemonSet default/agent ADDED #1"),
        (history.decision_ids[4], "manage: 1 node needs a daemon pod (1 create, 0 deletes)", "Node node-3 ADDED #12")]
    code, out, _ = kubus_audit("timeline", "daemonset/agent", "--until", "2025-06-01T11:00:00Z", "-o", "yaml")
    assert code == 0 and "node-3" not in out and "agent-aaaaa" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("timeline", "ds/nope"), "kubus audit timeline: no DaemonSet default/nope in the audit trail: no decision and "
                              "no watch event names it"),
    (("timeline", "rs/agent"), "kubus audit timeline: no ReplicaSet default/agent in the audit trail"),
    (("timeline", "ds/web", "-n", "other"), "kubus audit timeline: no DaemonSet other/web in the audit trail"),
    (("timeline", "deploy/web"), "kubus audit timeline: 'deploy/web': unknown kind 'deploy'; expected ds/NAME (a "
                                 "DaemonSet) or rs/NAME (a ReplicaSet)\n"),
    (("timeline", "web"), "kubus audit timeline: expected ds/NAME or rs/NAME, got 'web'\n"),
    (("timeline", "rs/web", "--since", "soon"), "kubus audit timeline: 'soon' is neither a duration"),
    (("timeline", "rs/web", "--html", "/nonexistent/dir/web.html"), "kubus audit timeline: cannot write --html "
                                                                    "/nonexistent/dir/web.html: No such file"),
])
def test_bad_input_is_one_line_and_exit_2(kubus_audit: Audit, argv: tuple[str, ...], message: str) -> None:
    code, out, err = kubus_audit(*argv)
    assert (code, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


def test_an_unreadable_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kubus.db").write_bytes(b"this is not a database" * 100)
    args = build_parser().parse_args(["audit", "timeline", "ds/agent", "--data-dir", str(tmp_path)])
    assert audit_command.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kubus audit timeline: ") and err.count("\n") == 1


def test_a_window_with_no_pod_draws_nothing(kubus_audit: Audit, tmp_path: Path) -> None:
    """The DaemonSet is known (its decision at 10:00:01), but its first pod came at 10:00:02.5."""
    page = tmp_path / "empty.html"
    code, out, err = kubus_audit("timeline", "ds/agent", "--until", "2025-06-01T10:00:02Z", "--html", str(page))
    assert (code, err) == (0, "")
    assert out.splitlines() == ["DaemonSet default/agent: 0 nodes, 0 pods",
                                "nothing to draw: no pod of it changed in the time range", f"written: {page}"]
    assert "nothing to draw" in page.read_text() and "<svg" not in page.read_text()


def test_many_rows_are_summarised(kubus_audit: Audit) -> None:
    code, out, _ = kubus_audit("timeline", "rs/web", "--rows", "1")
    assert code == 0
    assert "... and 2 more (--rows 3 shows every one)" in out.splitlines()


# --- the page --------------------------------------------------------------------------------------------------
NASTY = "<script>alert('pod')</script>"
NASTY_REASON = '"><img src=x onerror=alert(1)> too few replicas & </table>'


async def _nasty_pod(store: Store) -> None:
    """A pod of web whose name and whose decision's reason hold markup (the trail keeps whatever it was given)."""
    correlation = f"{RS}@20~1"
    async with store.transaction() as tx:
        decision_id = await tx.insert_decision(Decision(
            correlation_id=correlation, controller_key=RS, controller_kind="ReplicaSet", partition=0, stream_seq=14,
            trigger=None, decided_at=at(130), duration_ms=1.0, summary={"reason": NASTY_REASON}))
        action = CreatePods(key=f"{correlation}/create", namespace=NS, controller=RS, decision_id=decision_id,
                            issued_at="2025-06-01T10:02:10Z", pods=[_pod(NASTY, f"{correlation}/create/0")])
        await tx.enqueue([OutboxRow(key=action.key, decision_id=decision_id, subject="kubus.actions.0",
                                    payload=codec.encode(action), created_at=at(130),
                                    targets=tuple(targets_of(action)))])
        await tx.record_events([_event(14, "Pod", "ADDED", NASTY, "pod-nasty", 400, 131, owner="ReplicaSet/web",
                                       facts=pod_facts(revision=NASTY, ready_since=131))])
    await store.record_results([ResultRow(
        key=f"{correlation}/create/0", action_key=action.key, decision_id=decision_id, action="create_pods",
        outcome="succeeded", code=201, reason="", message="", object_uid="pod-nasty", executor="e", attempts=1,
        finished_at=at(130.5), subject=f"{NS}/{NASTY}", resource_version="400")])


@pytest.fixture
async def nasty(history: Scenario, store: Store) -> None:
    await _nasty_pod(store)


@pytest.fixture
def page(nasty: None, kubus_audit: Audit, tmp_path: Path) -> str:
    path = tmp_path / "web.html"
    code, out, _ = kubus_audit("timeline", "rs/web", "--html", str(path))
    assert code == 0 and out.endswith(f"written: {path}\n")
    return path.read_text()


def test_the_page_fetches_nothing(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<(link|iframe|img|object|embed)\b", page, re.I)
    assert "@import" not in page and "url(" not in page
    assert page.count("<svg") == 1 and page.count('class="lane"') == 4


def test_the_page_escapes_what_the_cluster_wrote(page: str) -> None:
    assert NASTY not in page and NASTY_REASON not in page
    assert page.count("<script>") == 1  # the page's own
    assert html.escape(NASTY, quote=True) in page
    assert html.escape(NASTY_REASON, quote=True) in page
    assert "<img" not in page


def test_the_page_shows_each_decision(page: str, history: Scenario) -> None:
    assert page.count('class="mark kubus"') == 6  # 3 created, 2 deleted, the nasty pod's: kubus's
    assert f'<tr id="decision-{history.decision_ids[3]}">' in page
    assert "kubus replay --controller ReplicaSet/default/web --explain --since 2025-06-01T10:02:00.500Z" in page


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no chromium on PATH: `apt-get install chromium` (.ci/run installs it)")


def _headless(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-extensions", *argv], capture_output=True, text=True,
                          timeout=120, check=False)


def _png_colours(data: bytes) -> set[bytes]:
    """The distinct pixels of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, colour, interlace) in ((8, 6, 0), (8, 2, 0))
    bpp = 4 if colour == 6 else 3
    raw, stride, rows, previous = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return {row[i:i + bpp] for row in rows for i in range(0, stride, bpp * 7)}


def test_the_page_in_a_real_browser(page: str, tmp_path: Path, history: Scenario) -> None:
    """Chromium runs the page's script (data-ready), draws a lane per pod, fills the panel with the first kubus
    change's decision, and the screenshot is not blank."""
    path = tmp_path / "web.html"
    dumped = _headless("--dump-dom", path.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = dumped.stdout
    assert 'data-ready="yes"' in dom
    assert dom.count('class="lane"') == 4
    panel = re.search(r'<code id="d-decision">(.*?)</code>', dom)
    assert panel is not None and panel.group(1).startswith(f"{history.decision_ids[2]} at 2025-06-01T10:01:01.000Z")
    assert NASTY not in dom  # escaped in the DOM too: no element was made of it
    shot = tmp_path / "shot.png"
    taken = _headless("--window-size=1120,640", f"--screenshot={shot}", path.as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    colours = _png_colours(shot.read_bytes())
    assert len(colours) >= 6, colours  # white, text, the revisions' colours pale and solid, the grey of deleted
