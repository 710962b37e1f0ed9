"""The export format: a file reads back into the bundles it was written from, and a file that is truncated,
out of order or from a newer kubus is refused with the line number and the reason."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable

import pytest

from messages.observed import SCHEMA_VERSION
from replay import fileformat
from replay.bundles import Bundle
from replay.fileformat import FormatError
from tests.replay.conftest import read


def lines_of(history: bytes) -> list[bytes]:
    return history.splitlines(keepends=True)


def kind_of(line: bytes) -> str:
    return str(json.loads(line).get("line", "header"))


def first(lines: list[bytes], kind: str, after: int = 0, where: Callable[[dict[str, object]], bool] | None = None
          ) -> int:
    """The 0-based index of the first line of `kind` at or after `after`."""
    for i in range(after, len(lines)):
        if kind_of(lines[i]) == kind and (where is None or where(json.loads(lines[i]))):
            return i
    raise AssertionError(f"no {kind} line")


def refused(data: bytes) -> FormatError:
    with pytest.raises(FormatError) as raised:
        read(data)
    return raised.value


def test_a_file_reads_back_into_the_same_bundles(bundles: list[Bundle], history: bytes) -> None:
    back = read(history)
    # a tick's results travel as result lines before it: the bundle has them, decoded
    assert [b.tick for b in back] == [dataclasses.replace(b.tick, results=[]) for b in bundles]
    assert [[m[0] for m in b.messages] for b in back] == [[m[0] for m in b.messages] for b in bundles]
    assert [b.results for b in back] == [b.results for b in bundles]
    assert [[(d.id, d.correlation_id, d.summary, d.actions) for d in b.decisions or ()] for b in back] == \
        [[(d.id, d.correlation_id, d.summary, d.actions) for d in b.decisions or ()] for b in bundles]
    lines = lines_of(history)
    header = json.loads(lines[0])
    assert header["kubus_events"] == fileformat.FORMAT and header["schema"] == SCHEMA_VERSION
    assert header["decisions"] is True
    assert {kind_of(line) for line in lines[1:]} == {"state", "event", "result", "tick", "decision", "end"}
    end = json.loads(lines[-1])
    assert end["counts"]["tick"] == len(bundles)
    assert end["counts"]["decision"] == sum(len(b.decisions or ()) for b in bundles)


def test_a_file_without_its_end_line_is_truncated(history: bytes) -> None:
    lines = lines_of(history)
    error = refused(b"".join(lines[:-1]))
    assert (error.line, error.reason) == (len(lines), "the file ends without its end line: truncated")


def test_a_file_cut_inside_a_line_names_that_line(history: bytes) -> None:
    lines = lines_of(history)
    cut = first(lines, "event", after=len(lines) // 2)
    error = refused(b"".join(lines[:cut]) + lines[cut][: len(lines[cut]) // 2])
    assert error.line == cut + 1
    assert error.reason.startswith("not a JSON line (truncated?)")


def test_a_file_cut_between_a_tick_and_its_decisions_says_so(history: bytes) -> None:
    lines = lines_of(history)
    decision = first(lines, "decision", after=len(lines) // 2)
    data = b"".join(lines[:decision]) + lines[-1]
    error = refused(data)
    assert error.line == decision + 1
    assert re.match(r"tick \d+ committed decisions \[[\d, ]+\], the file holds 0 of them", error.reason), error.reason


def test_events_out_of_order_are_refused_at_the_second(history: bytes) -> None:
    lines = lines_of(history)
    a = first(lines, "event", after=len(lines) // 3)
    assert kind_of(lines[a + 1]) == "event"
    lines[a], lines[a + 1] = lines[a + 1], lines[a]
    error = refused(b"".join(lines))
    low, high = json.loads(lines[a])["seq"], json.loads(lines[a + 1])["seq"]
    assert (error.line, error.reason) == (a + 2, f"event sequence {high} after {low}: out of order")


def test_ticks_out_of_order_are_refused(history: bytes) -> None:
    lines = lines_of(history)
    tick = first(lines, "tick", after=len(lines) // 2)
    fields = json.loads(lines[tick])
    fields["id"] = 1
    lines[tick] = json.dumps(fields).encode() + b"\n"
    error = refused(b"".join(lines))
    assert error.line == tick + 1
    assert re.fullmatch(r"tick 1 after tick \d+: out of order", error.reason), error.reason


def test_an_event_beyond_the_range_of_its_tick_is_refused(history: bytes) -> None:
    lines = lines_of(history)
    tick = next(i for i in range(1, len(lines)) if kind_of(lines[i]) == "tick" and kind_of(lines[i - 1]) == "event")
    fields = json.loads(lines[tick])
    fields["first_seq"], fields["last_seq"] = 1, json.loads(lines[tick - 1])["seq"] - 1
    lines[tick] = json.dumps(fields).encode() + b"\n"
    error = refused(b"".join(lines))
    assert error.line == tick + 1
    assert "but the event lines before it" in error.reason, error.reason


def test_a_missing_result_is_refused_at_the_tick_that_was_fed_it(history: bytes) -> None:
    lines = lines_of(history)
    result = first(lines, "result", after=len(lines) // 2)
    tick = first(lines, "tick", after=result)
    del lines[result]
    error = refused(b"".join(lines))
    assert error.line == tick  # one line up, the result having gone
    assert re.match(r"tick \d+ was fed results \[.*\], but the result lines before it hold", error.reason)


def test_counts_that_do_not_match_the_end_line_are_refused(history: bytes) -> None:
    lines = lines_of(history)
    end = json.loads(lines[-1])
    end["counts"]["event"] += 1
    lines[-1] = json.dumps(end).encode() + b"\n"
    error = refused(b"".join(lines))
    assert error.line == len(lines)
    assert error.reason.startswith("the end line counts")


def test_a_newer_format_or_schema_is_refused_on_line_1(history: bytes) -> None:
    lines = lines_of(history)
    for key, value, reason in (
            ("kubus_events", fileformat.FORMAT + 1, f"format version {fileformat.FORMAT + 1} is newer than this kubus "
                                                    f"reads ({fileformat.FORMAT}): upgrade kubus"),
            ("schema", SCHEMA_VERSION + 1, f"event schema version {SCHEMA_VERSION + 1} is newer than this kubus "
                                           f"understands ({SCHEMA_VERSION}): upgrade kubus")):
        header = json.loads(lines[0])
        header[key] = value
        error = refused(json.dumps(header).encode() + b"\n" + b"".join(lines[1:]))
        assert (error.line, error.reason) == (1, reason)


def test_an_event_of_a_newer_schema_is_refused_at_its_line(history: bytes) -> None:
    lines = lines_of(history)
    event = first(lines, "event", after=len(lines) // 2)
    fields = json.loads(lines[event])
    fields["event"]["v"] = SCHEMA_VERSION + 1
    lines[event] = json.dumps(fields).encode() + b"\n"
    error = refused(b"".join(lines))
    assert (error.line, error.reason) == (event + 1, f"event has schema version {SCHEMA_VERSION + 1}, newer than "
                                                     f"this kubus understands ({SCHEMA_VERSION}): upgrade kubus")


def test_not_a_kubus_file(tmp_path: object) -> None:
    error = refused(b'{"hello": "world"}\n')
    assert error.line == 1 and error.reason.startswith("not a kubus events header")
    error = refused(b"")
    assert (error.line, error.reason) == (1, "empty file: no kubus events header")
    header = json.dumps({"kubus_events": 1, "schema": 1}).encode() + b"\n"
    error = refused(header + b'{"line": "gossip"}\n')
    assert (error.line, error.reason) == (2, "unknown line kind 'gossip'")


def test_an_unusable_message_travels_as_bytes(bundles: list[Bundle]) -> None:
    """A message ingest published that this kubus cannot decode (the live loop logged and skipped it) is kept
    as bytes, base64 when it is not even JSON, and reads back as the same bytes."""
    bundle = next(b for b in bundles if b.tick.kind == "batch" and b.messages)
    seq, subject, _ = bundle.messages[0]
    for payload in (b"not json at all", b'{"msg": "observed", "kind": 3}'):
        odd = Bundle(bundle.tick, [(seq, subject, payload)], bundle.results, bundle.decisions)
        start = next(b for b in bundles if b.tick.kind == "start")
        data = _write([start, odd])
        back = read(data)
        assert back[1].messages == [(seq, subject, payload)]


def _write(bundles: list[Bundle]) -> bytes:
    import io

    out = io.BytesIO()
    fileformat.write(out, bundles, {})
    return out.getvalue()
