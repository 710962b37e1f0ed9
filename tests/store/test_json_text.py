"""The store's JSON columns are written with store.json_text.dumps: the same text as json.dumps (what SQLAlchemy's
JSON type wrote before), for every value a column may hold and for the values JSON cannot hold (the same error);
and both backends' engines serialize with it (what tests/store/test_observed_event_rows.py pins as stored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from store import json_text
from store.engine import create_engine
from store.tables import JSON
from store.urls import resolve

VALUES = [
    pytest.param(None, id="null"),
    pytest.param(True, id="true"),
    pytest.param(0, id="zero"),
    pytest.param(-(2**70), id="big-int"),
    pytest.param(2.5, id="float"),
    pytest.param(1e300, id="float-exponent"),
    pytest.param(-0.0, id="negative-zero"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("-inf"), id="minus-infinity"),
    pytest.param("plain", id="string"),
    pytest.param('ünïcode "quoted" \\ \n\t\x00\u2028 \U0001f600', id="string-escapes"),
    pytest.param([], id="empty-list"),
    pytest.param({}, id="empty-object"),
    pytest.param(("a", 1), id="tuple"),
    pytest.param({"node": "node-1", "revision": "6d4b8f", "ready_since": None, "deleting": False}, id="pod-facts"),
    pytest.param({"3": [1, {"b": [None, True, "é"]}], "a": {}}, id="nested-keys-unsorted"),
    pytest.param({1: "int", 2.5: "float", False: "bool", None: "none"}, id="non-string-keys"),
    pytest.param([{"key": "rs-web/create/0000001", "code": 201, "attempts": 1}], id="tick-results"),
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_writes_what_json_dumps_writes(value: Any) -> None:
    """The text is json.dumps' own, byte for byte (spacing, key order, ASCII escapes, floats)."""
    assert json_text.dumps(value) == json.dumps(value)


@pytest.mark.parametrize("value", [
    pytest.param({1, 2}, id="set"),
    pytest.param(object(), id="object"),
    pytest.param({("a", "b"): 1}, id="tuple-key"),
    pytest.param([b"bytes"], id="nested-bytes"),
])
def test_dumps_refuses_what_json_dumps_refuses(value: Any) -> None:
    """A value JSON cannot hold raises json.dumps' TypeError, with its message."""
    with pytest.raises(TypeError) as expected:
        json.dumps(value)
    with pytest.raises(TypeError) as got:
        json_text.dumps(value)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("url", [None, "postgresql://kubus@127.0.0.1:1/kubus"], ids=["sqlite", "postgresql"])
async def test_the_engines_bind_json_columns_with_it(url: str | None, tmp_path: Path) -> None:
    """Both backends' engines (not connected) bind a JSON column's value with json_text.dumps."""
    engine = create_engine(resolve(url, str(tmp_path)))
    try:
        dialect = engine.dialect
        assert dialect._json_serializer is json_text.dumps  # type: ignore[attr-defined]
        process = JSON.dialect_impl(dialect).bind_processor(dialect)
        assert process is not None
        assert process({"deleting": False, "node": "ü"}) == '{"deleting": false, "node": "\\u00fc"}'
    finally:
        await engine.dispose()
