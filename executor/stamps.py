"""kube.times.format_time and format_micro_time for the executor's hot paths, the same text at a fraction of
the cost.

Every result carries `finished_at` (a MicroTime) and every pod event two metav1.Time stamps (the event's own,
and the correlator's aggregate): three `datetime.strftime` calls per pod operation, ~20,000 instructions each
(Python's strftime rewrites its format for %f and %z, builds a time tuple and calls the C library's). The
stamps of one process come from one clock and many fall within the same second, so the text up to the second
is kept from the last call and only the microseconds are added. That text is strftime's own, so what these
return is what kube.times returns; a datetime that is not exactly a UTC `datetime` (another zone, a subclass,
a naive one) goes to kube.times, with its conversion and its error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from kube import times

# (the fields up to the second, the text for them), replaced whole so a reader never pairs one with the other's
_Seconds = tuple[tuple[int, int, int, int, int, int], str]
_last_micro: Final[list[_Seconds]] = [((0, 0, 0, 0, 0, 0), "")]
_last_time: Final[list[_Seconds]] = [((0, 0, 0, 0, 0, 0), "")]


def format_time(moment: datetime) -> str:
    """kube.times.format_time(moment): metav1.Time, e.g. ``2024-01-02T03:04:05Z``."""
    if type(moment) is not datetime or moment.tzinfo is not UTC:
        return times.format_time(moment)
    key = (moment.second, moment.minute, moment.hour, moment.day, moment.month, moment.year)
    last = _last_time[0]
    if last[0] != key:
        last = _last_time[0] = (key, moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return last[1]


def format_micro_time(moment: datetime) -> str:
    """kube.times.format_micro_time(moment): metav1.MicroTime, e.g. ``2024-01-02T03:04:05.000006Z``."""
    if type(moment) is not datetime or moment.tzinfo is not UTC:
        return times.format_micro_time(moment)
    key = (moment.second, moment.minute, moment.hour, moment.day, moment.month, moment.year)
    last = _last_micro[0]
    if last[0] != key:
        last = _last_micro[0] = (key, moment.strftime("%Y-%m-%dT%H:%M:%S."))
    # strftime's %f: the microseconds as six digits, zero-padded (1,000,000 added, its leading 1 cut)
    return f"{last[1]}{str(moment.microsecond + 1_000_000)[1:]}Z"
