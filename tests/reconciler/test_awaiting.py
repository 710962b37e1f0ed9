"""reconciler.awaiting: a batch's window ends at the event that meets a controller's expectations (and only then
early), counted from the expectations the loop's commits left unmet."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.aio.msg import Msg

from kube.testing import daemonset, pod, replicaset
from messages import codec
from messages.keys import ControllerKey, ControllerKind
from messages.observed import ADDED, DELETED, MODIFIED
from reconciler.awaiting import Countdown, Unmet
from reconciler.core.expectations import EXPECTATIONS_TIMEOUT, expect
from reconciler.intake import Intake
from tests.reconciler.builders import observed

NOW = datetime(2026, 3, 15, 12, 0, 0, tzinfo=UTC)
NEVER = 30.0  # a window that would end only by its length fails the test by a timeout, not by a hang
DS = daemonset("web").ns("prod").uid("ds-uid").build()
OTHER = daemonset("api").ns("prod").uid("ds-other").build()
RS = replicaset("web").ns("prod").uid("rs-uid").build()
DS_KEY = ControllerKey(ControllerKind.DAEMON_SET, "prod", "web")
RS_KEY = ControllerKey(ControllerKind.REPLICA_SET, "prod", "web")


def event(obj: Any, event_type: str = ADDED) -> Msg:
    data = codec.encode(observed(obj, event_type))
    subject = f"kubus.events.3.{obj.kind}.{obj.metadata.uid}"
    return Msg(_client=None, subject=subject, data=data)  # type: ignore[arg-type]


def owned(name: str, owner: Any = DS) -> Any:
    return pod(name).ns("prod").uid(f"uid-{name}").owned_by(owner).build()


def nothing_cached(uid: str) -> bool:
    return False


def countdown(adds: int = 0, dels: int = 0, key: ControllerKey = DS_KEY,
              known_pod: Callable[[str], bool] = nothing_cached) -> Countdown:
    unmet = Unmet()
    unmet.seed({key: expect(adds, dels, NOW)})
    found = unmet.countdown(NOW, known_pod)
    assert found is not None
    return found


def test_the_last_awaited_creation_meets_the_expectations_and_not_one_before() -> None:
    window = countdown(adds=3)
    assert [window.met_by(event(owned(f"p{i}"))) for i in range(3)] == [False, False, True]


def test_pods_that_concern_no_awaiting_controller_count_for_nothing() -> None:
    window = countdown(adds=1)
    assert not window.met_by(event(owned("a", OTHER)))  # another DaemonSet's
    assert not window.met_by(event(owned("b", RS)))  # a ReplicaSet of the same name
    assert not window.met_by(event(pod("c").ns("prod").uid("uid-c").build()))  # an orphan
    assert not window.met_by(event(pod("d").ns("dev").uid("uid-d").owned_by(DS).build()))  # another namespace
    assert not window.met_by(event(DS, MODIFIED))  # not a pod
    assert not window.met_by(event(owned("e"), MODIFIED))  # an update is no creation
    assert window.met_by(event(owned("f")))


def test_a_deletion_counts_once_whether_its_pod_shows_a_deletion_timestamp_then_goes_or_just_goes() -> None:
    window = countdown(dels=3, key=RS_KEY)
    first = owned("a", RS)
    deleting = pod("a").ns("prod").uid("uid-a").owned_by(RS).deleting(NOW).build()
    assert not window.met_by(event(deleting, MODIFIED))
    assert not window.met_by(event(first, DELETED))  # the same pod: counted at its deletionTimestamp
    assert not window.met_by(event(owned("b", RS), DELETED))
    assert window.met_by(event(owned("c", RS), DELETED))


def test_with_only_creations_awaited_the_events_of_cached_pods_are_not_read() -> None:
    read: list[str] = []

    def cached(uid: str) -> bool:
        read.append(uid)
        return uid == "uid-old"

    window = countdown(adds=1, known_pod=cached)
    deleting = pod("old").ns("prod").uid("uid-old").owned_by(DS).deleting(NOW).build()
    assert not window.met_by(event(deleting, MODIFIED))  # cached: no creation, and no deletion is awaited
    assert window.met_by(event(owned("new")))
    assert read == ["uid-old", "uid-new"]


def test_with_deletions_awaited_the_events_of_cached_pods_count() -> None:
    window = countdown(dels=1, known_pod=lambda uid: True)
    assert window.met_by(event(owned("a"), DELETED))


def test_creations_and_deletions_both_awaited_end_the_window_only_once_both_are_seen() -> None:
    window = countdown(adds=1, dels=1)
    assert not window.met_by(event(owned("a")))
    assert window.met_by(event(owned("b"), DELETED))


def test_what_cannot_be_read_counts_for_nobody() -> None:
    window = countdown(adds=1)
    garbage = Msg(_client=None, subject="kubus.events.3.Pod.x", data=b"{not json")  # type: ignore[arg-type]
    squeezed = Msg(_client=None, subject="kubus.events.3.Pod.x",  # type: ignore[arg-type]
                   data=codec.compress(codec.encode(observed(owned("a")))))
    assert not window.met_by(garbage)
    assert not window.met_by(squeezed)
    assert window.met_by(event(owned("b")))


def test_only_unmet_unexpired_expectations_are_awaited_and_commits_keep_them_current() -> None:
    unmet = Unmet()
    unmet.seed({DS_KEY: expect(0, 0, NOW), RS_KEY: expect(2, 0, NOW)})
    assert len(unmet) == 1
    unmet.saved({str(DS_KEY): expect(5, 0, NOW), str(RS_KEY): expect(0, 0, NOW)}, [])
    window = unmet.countdown(NOW, nothing_cached)
    assert window is not None
    assert [window.met_by(event(owned(f"p{i}"))) for i in range(5)] == [False] * 4 + [True]
    assert not window.met_by(event(owned("r", RS)))  # the ReplicaSet's were met: it awaits nothing
    unmet.saved({}, [str(DS_KEY)])
    assert unmet.countdown(NOW, nothing_cached) is None  # nothing awaited: the window runs its length
    unmet.saved({str(DS_KEY): expect(1, 0, NOW)}, [])
    assert unmet.countdown(NOW + EXPECTATIONS_TIMEOUT, nothing_cached) is not None
    expired = NOW + EXPECTATIONS_TIMEOUT + timedelta(seconds=1)
    assert unmet.countdown(expired, nothing_cached) is None  # expired: satisfied


async def test_a_window_ends_at_the_event_that_meets_them_and_leaves_the_rest_for_the_next_batch() -> None:
    intake = Intake()
    window = countdown(adds=2)
    first: list[Msg] = []
    gathering = asyncio.ensure_future(intake.gather(first, 500, NEVER, window.met_by))
    await intake.deliver(event(owned("a")))
    await intake.deliver(event(owned("x", OTHER)))
    assert not gathering.done()
    await intake.deliver(event(owned("b")))
    await intake.deliver(event(owned("c")))  # arrived with the one that met them: the next batch's
    await asyncio.wait_for(gathering, 5.0)  # long before NEVER
    assert [m.subject.rsplit(".", 1)[1] for m in first] == ["uid-a", "uid-x", "uid-b"]
    assert len(intake) == 1
