"""A replay's reader decodes a pod's object with its line (`Reader(..., decode_objects=True)`): the bundles are the
ones the plain reader gives, each such object the pod the cache would decode from the bytes, and a line that is
not a pod's creation or update, or that is bad, reads (or is refused) exactly as the plain reader reads it."""

from __future__ import annotations

import io
import json
from typing import Any

import msgspec
import pytest

from kube import codec
from kube.core import Pod
from messages.observed import ObservedEvent
from replay import fileformat
from replay.bundles import Bundle
from replay.fileformat import FormatError


def read(data: bytes, decode_objects: bool) -> list[Bundle]:
    reader = fileformat.Reader(io.BytesIO(data), decode_objects=decode_objects)
    reader.read_header()
    return list(reader)


def message_fields(payload: Any) -> Any:
    """A message as the cache folds it: an event's fields, its object decoded (the same either way)."""
    if not isinstance(payload, ObservedEvent):
        return payload
    fields = msgspec.structs.asdict(payload)
    obj = fields["object"]
    fields["object"] = ("decoded", obj) if isinstance(obj, Pod) else ("bytes", bytes(obj))
    return fields


def same_bundles(plain: list[Bundle], decoded: list[Bundle]) -> int:
    """Asserts the bundles are the same but for decoded pods (each the one the bytes decode to); how many there were."""
    assert [(b.tick, b.results, b.decisions, b.line) for b in decoded] == \
        [(b.tick, b.results, b.decisions, b.line) for b in plain]
    count = 0
    for ours, theirs in zip(decoded, plain, strict=True):
        assert [m[:2] for m in ours.messages] == [m[:2] for m in theirs.messages]
        for (_, _, mine), (_, _, other) in zip(ours.messages, theirs.messages, strict=True):
            mine_fields, other_fields = message_fields(mine), message_fields(other)
            if isinstance(mine_fields, dict) and mine_fields["object"][0] == "decoded":
                count += 1
                assert mine.kind == "Pod" and isinstance(other.object, msgspec.Raw)
                other_fields["object"] = ("decoded", codec.decode(other.object, Pod))
            assert mine_fields == other_fields
    return count


def test_the_bundles_are_the_same_with_the_pods_of_creations_and_updates_decoded(history: bytes) -> None:
    plain, decoded = read(history, False), read(history, True)
    creations_and_updates = sum(1 for b in plain for m in b.messages
                                if isinstance(m[2], ObservedEvent) and m[2].kind == "Pod"
                                and m[2].type in ("ADDED", "MODIFIED"))
    # every one of them but the first of each run of them (the reader decodes a line as a pod's after one)
    assert creations_and_updates // 2 < same_bundles(plain, decoded) <= creations_and_updates
    assert not any(isinstance(m[2], ObservedEvent) and isinstance(m[2].object, Pod)
                   for b in plain for m in b.messages)


def pod_runs(lines: list[bytes]) -> list[int]:
    """The 0-based indexes of event lines right after a pod's creation or update (read as a pod's)."""
    found = []
    for i in range(1, len(lines)):
        before = json.loads(lines[i - 1])
        if before.get("line") in ("event", "state") and before["event"]["kind"] == "Pod" and \
                before["event"]["type"] in ("ADDED", "MODIFIED") and json.loads(lines[i])["line"] == "event":
            found.append(i)
    return found


def changed(line: bytes, change: Any) -> bytes:
    fields = json.loads(line)
    change(fields["event"])
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def as_node(event: dict[str, Any]) -> None:
    event["kind"] = "Node"  # its object still reads as a pod
    event["object"]["kind"] = "Node"


def undecodable_pod(event: dict[str, Any]) -> None:
    event["object"]["spec"] = {"containers": "three"}


def a_deletion(event: dict[str, Any]) -> None:
    event["type"] = "DELETED"


@pytest.mark.parametrize("change", [as_node, undecodable_pod, a_deletion])
def test_a_line_after_a_pod_s_that_is_not_one_reads_as_the_plain_reader_reads_it(history: bytes, change: Any) -> None:
    """Another kind's event (its object read as a pod would do), a pod the model refuses (the fold sets it aside
    as unusable) or a deletion (its pod decoded is as good as its bytes) after a pod's creation or update."""
    lines = history.splitlines(keepends=True)
    at = pod_runs(lines)
    assert len(at) > 10
    for i in at[::max(1, len(at) // 10)]:
        lines[i] = changed(lines[i], change)
    data = b"".join(lines)
    same_bundles(read(data, False), read(data, True))


def outcome(data: bytes, decode_objects: bool) -> list[Bundle] | tuple[int, str]:
    try:
        return read(data, decode_objects)
    except FormatError as error:
        return error.line, error.reason


@pytest.mark.parametrize(("bad", "refused"), [
    pytest.param(lambda line: line[:len(line) // 2], True, id="cut-inside"),
    pytest.param(lambda line: b"\n", True, id="empty"),
    pytest.param(lambda line: line.replace(b'"line":"event"', b'"line":"gossip"'), True, id="an-unknown-line"),
    pytest.param(lambda line: changed(line, lambda e: e.update(v=99)), True, id="a-newer-schema"),
    # an event this kubus cannot decode travels as its bytes (the live loop logged and skipped it)
    pytest.param(lambda line: changed(line, lambda e: e.update(v="one")), False, id="a-field-mistyped"),
    pytest.param(lambda line: changed(line, lambda e: e.update(msg="result")), False, id="another-message"),
    pytest.param(lambda line: changed(line, lambda e: e.pop("uid")), False, id="a-field-missing"),
])
def test_a_bad_line_after_a_pod_s_reads_or_is_refused_as_the_plain_reader_does(history: bytes, bad: Any,
                                                                               refused: bool) -> None:
    lines = history.splitlines(keepends=True)
    at = pod_runs(lines)
    i = at[len(at) // 2]
    lines[i] = bad(lines[i])
    data = b"".join(lines)
    plain, decoded = outcome(data, False), outcome(data, True)
    if refused:
        assert isinstance(plain, tuple) and plain[0] == i + 1
        assert decoded == plain
    else:
        assert isinstance(plain, list) and isinstance(decoded, list)
        same_bundles(plain, decoded)
        assert any(m[0] == json.loads(lines[i])["seq"] and isinstance(m[2], bytes) for b in decoded for m in b.messages)
