"""Kubernetes timestamps: RFC 3339 strings on the wire, aware UTC datetimes in code.

The object model keeps timestamps as the strings the API sent, so a decode and
re-encode never reformats them; code that compares times goes through these
two functions.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime

__all__ = ["format_micro_time", "format_time", "parse_time"]

# Go's time.Parse(time.RFC3339, ...) accepts any number of fraction digits and
# requires an explicit offset; Python's fromisoformat is more lenient, so the
# shape is checked first.
_RFC3339 = re.compile(
    r"(?P<base>\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?(?P<tz>[Zz]|[+-]\d{2}:\d{2})\Z"
)


@functools.lru_cache(maxsize=65536)
def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime (sub-microsecond digits are truncated).

    Cached: a controller compares the same few timestamps (pods created and made ready in the same
    second) over and over, and a datetime is immutable."""
    if len(value) == 20 and value[19] == "Z" and value[10] == "T":
        try:  # the API's own format, "2006-01-02T15:04:05Z": C-speed, and still strict about its shape
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    match = _RFC3339.match(value)
    if match is None:
        raise ValueError(f"invalid RFC 3339 timestamp: {value!r}")
    frac = (match["frac"] or "")[:6].ljust(6, "0")
    tz = match["tz"].upper().replace("Z", "+00:00")
    parsed = datetime.fromisoformat(f"{match['base'].replace('t', 'T')}.{frac}{tz}")
    return parsed.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """Format as metav1.Time does: UTC, whole seconds, e.g. ``2024-01-02T03:04:05Z``."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """Format as metav1.MicroTime does (events' ``eventTime``): UTC with six fraction digits."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("naive datetime: Kubernetes timestamps need a timezone")
    return moment.astimezone(UTC)
