"""Why a sync held back by its expectations made no creates or deletes, in its decision's reason (issue 21, 7).

The reason was empty for a ReplicaSet (`kubus replay --explain` printed `reason:` blank, `kubus audit controller`
a `-`) and said only "expectations not satisfied" for a DaemonSet: it names what is still awaited and since when.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from reconciler.core.expectations import Expectations, expect, held_back
from tests.reconciler.builders import NOW

SINCE = "since 2026-03-15T12:00:00.000Z"
EXPIRE = "they expire after 5m0s"


@pytest.mark.parametrize(("expectations", "now", "reason"), [
    pytest.param(expect(3, 0, NOW), NOW, f"expectations not satisfied: waiting to observe 3 creates, expected "
                 f"{SINCE} (0s ago; {EXPIRE})", id="creates"),
    pytest.param(expect(1, 0, NOW), NOW + timedelta(seconds=1.5), "expectations not satisfied: waiting to observe "
                 f"1 create, expected {SINCE} (1.5s ago; {EXPIRE})", id="one-create"),
    pytest.param(expect(3, 0, NOW).creation_observed(), NOW + timedelta(milliseconds=40, microseconds=400),
                 f"expectations not satisfied: waiting to observe 2 creates, expected {SINCE} (40ms ago; {EXPIRE})",
                 id="one-observed-rounded-to-ms"),
    pytest.param(expect(0, 2, NOW, frozenset({"default/web-b", "default/web-a"})), NOW + timedelta(minutes=4),
                 "expectations not satisfied: waiting to observe 2 deletes (default/web-a, default/web-b), expected "
                 f"{SINCE} (4m0s ago; {EXPIRE})", id="deletes-by-key-sorted"),
    pytest.param(expect(0, 7, NOW, frozenset(f"default/web-{i}" for i in range(7))), NOW,
                 "expectations not satisfied: waiting to observe 7 deletes (default/web-0, default/web-1, "
                 f"default/web-2, default/web-3, default/web-4, and 2 more), expected {SINCE} (0s ago; {EXPIRE})",
                 id="five-keys-shown"),
    pytest.param(Expectations(2, 1, frozenset(), NOW), NOW, "expectations not satisfied: waiting to observe 2 "
                 f"creates and 1 delete, expected {SINCE} (0s ago; {EXPIRE})", id="deletes-without-keys"),
    pytest.param(Expectations(-1, 1, frozenset({"default/x"}), NOW), NOW, "expectations not satisfied: waiting to "
                 f"observe 1 delete (default/x), expected {SINCE} (0s ago; {EXPIRE})", id="more-creates-seen"),
])
def test_held_back_reason(expectations: Expectations, now: datetime, reason: str) -> None:
    assert not expectations.satisfied(now)
    assert held_back(expectations, now) == reason
