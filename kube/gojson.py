"""JSON bytes as Go's encoding/json writes them.

Some upstream behaviour depends on exact bytes: the adopt/release patches the
controller-ref manager sends, and the ControllerRevision data the DaemonSet
controller compares byte for byte. Go writes compact JSON, escapes ``<``,
``>``, ``&``, U+2028 and U+2029, and sorts map keys (struct fields keep their
declaration order, which callers get by building dicts in that order and
passing ``sort_keys=False``).

Known gap: Go decodes JSON numbers into float64, so ``1.0`` prints as ``1``
there and as ``1.0`` here; Kubernetes objects hold integers where it matters.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["marshal"]

_HTML = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def marshal(value: Any, *, sort_keys: bool = True) -> bytes:
    """Encode ``value`` (dicts, lists, str, int, float, bool, None) like Go's json.Marshal."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=False)
    # The characters only ever appear inside strings, so escaping the whole
    # text is the same as escaping each string.
    return text.translate(_HTML).encode()
