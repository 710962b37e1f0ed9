"""Kubernetes timestamps: RFC 3339 strings on the wire, aware UTC datetimes in code.

The object model keeps timestamps as the strings the API sent, so a decode and
re-encode never reformats them; code that compares times goes through these
functions: ``parse_time`` reads every timestamp the API or kubus wrote (event
``observedAt``, result ``finishedAt``, history files), ``parse_typed_time`` only
what a person typed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = [
    "Clock",
    "format_go_duration",
    "format_micro_time",
    "format_time",
    "micros",
    "parse_go_duration",
    "parse_time",
    "parse_typed_time",
    "utcnow",
]

Clock = Callable[[], datetime]
"""Where code that must know the time asks for it: the shell passes the wall clock, tests a fake one."""


def utcnow() -> datetime:
    """The wall clock, as an aware UTC datetime: the :data:`Clock` a service runs on when no test gives another.
    Only the shell calls it; the reconciler's core is handed ``now``."""
    return datetime.now(UTC)

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
    if value[-1:] == "Z" and value[10:11] == "T" and (len(value) == 20 or (len(value) == 27 and value[19] == ".")):
        try:  # metav1.Time's "2006-01-02T15:04:05Z" and MicroTime's ".000000Z": C-speed, strict about the shape
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(moment: datetime) -> int:
    """An aware datetime as whole microseconds since the Unix epoch: exact (a datetime has no finer digits),
    and an int, whose differences are cheaper to work with than timedeltas in a loop over thousands of pods."""
    return (moment - _EPOCH) // _MICROSECOND


def parse_typed_time(text: str) -> datetime:
    """A timestamp a person typed on a command line, read leniently: RFC 3339 as :func:`parse_time` reads
    it, or any ISO 8601 date and time Python reads (``2025-06-01``, ``2025-06-01 10:00``); without an
    offset it is UTC. Raises ValueError. Never for what the API or kubus itself wrote: that is RFC 3339."""
    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


# The text of the last second formatted, by its fields (second first: the field that changes most): a service stamps
# many objects, results and events within one second, and strftime costs ~20,000 instructions (it rewrites its format
# for %f and %z, builds a time tuple and calls the C library's); the text up to the second is kept, and each format
# adds its own end. Only for an exact `datetime` in UTC: in another zone, or a subclass, equal fields need not be the
# same instant (or the same text). Replaced whole, so a reader never pairs one key with the other's text.
_last_second: list[tuple[tuple[int, int, int, int, int, int], str]] = [((0, 0, 0, 0, 0, 0), "")]


def format_time(moment: datetime) -> str:
    """Format as metav1.Time does: UTC, whole seconds, e.g. ``2024-01-02T03:04:05Z``."""
    if type(moment) is not datetime or moment.tzinfo is not UTC:
        return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")
    return _utc_second(moment) + "Z"


def format_micro_time(moment: datetime) -> str:
    """Format as metav1.MicroTime does (events' ``eventTime``): UTC with six fraction digits."""
    if type(moment) is not datetime or moment.tzinfo is not UTC:
        return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # strftime's %f: the microseconds as six digits, zero-padded (1,000,000 added, its leading 1 cut)
    return f"{_utc_second(moment)}.{str(moment.microsecond + 1_000_000)[1:]}Z"


def _utc_second(moment: datetime) -> str:
    """strftime's ``%Y-%m-%dT%H:%M:%S`` of an exact UTC `datetime`, the last second's text kept."""
    key = (moment.second, moment.minute, moment.hour, moment.day, moment.month, moment.year)
    last = _last_second[0]
    if last[0] != key:
        last = _last_second[0] = (key, moment.strftime("%Y-%m-%dT%H:%M:%S"))
    return last[1]


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("naive datetime: Kubernetes timestamps need a timezone")
    return moment.astimezone(UTC)


_GO_DURATION_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
                      "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_GO_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def parse_go_duration(text: str) -> timedelta:
    """Go's time.ParseDuration (a flag such as ``--min-resync-period 12h``): ``300ms``, ``1.5h``, ``2h45m``;
    ``0`` needs no unit. Nanoseconds below a microsecond are dropped. Raises ValueError with Go's message."""
    original, rest = text, text
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return timedelta(0)
    if not rest:
        raise ValueError(f'time: invalid duration "{original}"')
    nanoseconds = 0
    while rest:
        match = _GO_DURATION_PART.match(rest)
        assert match is not None  # every group may be empty
        whole, fraction, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not fraction:
            raise ValueError(f'time: invalid duration "{original}"')
        if not unit:
            raise ValueError(f'time: missing unit in duration "{original}"')
        scale = _GO_DURATION_UNITS.get(unit)
        if scale is None:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{original}"')
        nanoseconds += int(whole or "0") * scale
        if fraction:
            nanoseconds += int(fraction) * scale // 10 ** len(fraction)
        if nanoseconds > 2**63 - 1:
            raise ValueError(f'time: invalid duration "{original}"')
        rest = rest[match.end():]
    return timedelta(microseconds=(-nanoseconds if negative else nanoseconds) // 1_000)


def format_go_duration(duration: timedelta) -> str:
    """Go's Duration.String() for whole microseconds: ``12h0m0s``, ``1.5s``, ``0s``."""
    micro = duration // timedelta(microseconds=1)
    sign, micro = ("-", -micro) if micro < 0 else ("", micro)
    if micro < 1_000_000:
        if micro == 0:
            return "0s"
        return f"{sign}{micro / 1000:g}ms" if micro % 1000 == 0 else f"{sign}{micro}\u00b5s"
    hours, rest = divmod(micro, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    text = f"{seconds}.{fraction:06d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text
