"""The text of the store's JSON columns: `dumps`, what `json.dumps(value)` writes, at half its CPU.

SQLAlchemy's JSON type serializes every bound value with the dialect's `json_serializer` (json.dumps unless the
engine names another; on SQLite the text is what the column holds, on PostgreSQL what JSONB parses). The audit
rows carry one each (an observed event's facts, ~4 a pod) and a tick four: json.dumps builds a JSONEncoder's C
encoder (`c_make_encoder`) for every call and goes through two Python frames around it, for a few dozen bytes of
output. `dumps` calls one C encoder built once with json.dumps' own settings (separators ", " and ": ", ASCII
only, NaN allowed, keys unsorted, its TypeError for what JSON cannot hold), so the text, and with it every row,
is the same byte for byte (tests/store/test_json_text.py). The one setting not kept is json.dumps'
check_circular: a cycle raises RecursionError instead of ValueError; a column value never has one.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Final

_ENCODE: Final = c_make_encoder(None, json.JSONEncoder().default, encode_basestring_ascii, None, ": ", ", ",
                                False, False, True)


def dumps(value: Any) -> str:
    """json.dumps(value), the same text."""
    return "".join(_ENCODE(value, 0))
