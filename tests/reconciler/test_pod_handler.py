"""One pod handler for both controllers (reconciler.core.handling.pod_handler): which controllers' handlers a pod's
change runs, case by case, and that running only those wakes what running every controller's handler did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from kube.core import Pod
from kube.testing import daemonset, node, pod, replicaset
from messages.observed import ADDED, DELETED, MODIFIED
from reconciler.core.cache import Cache, Change
from reconciler.core.controllers import Controllers
from reconciler.core.daemonset import handlers as ds_handlers
from reconciler.core.handling import OwnerHandlers, _foreign, pod_handler
from reconciler.core.replicaset import handlers as rs_handlers
from reconciler.core.view import CacheView, Wakeups
from tests.reconciler.builders import cache_of

LABELS = {"app": "both"}  # matched by the DaemonSet's and the ReplicaSet's selectors: an orphan concerns both
DS = daemonset("ds").selector(LABELS).build()
RS = replicaset("rs").selector(LABELS).build()
OTHER = node("n1").build()  # a controller of another kind (owned_by takes a Node as well as a workload)


def owned(owner: Any, rv: str = "1", *, controller: bool = True) -> Pod:
    b = pod("p").labels(LABELS).rv(rv)
    if owner is not None:
        b = b.owned_by(owner, controller=controller)
    return b.build()


def change(old: Pod | None, new: Pod | None) -> Change:
    obj = new if new is not None else old
    assert obj is not None
    event_type = ADDED if old is None else DELETED if new is None else MODIFIED
    meta = obj.metadata
    return Change("Pod", meta.namespace, meta.name, meta.uid, old, new, event_type, False)


# (case, old, new, the kinds whose handlers run, in the dispatcher's order: the ReplicaSet's first)
CASES: list[tuple[str, Pod | None, Pod | None, list[str]]] = [
    ("added, the DaemonSet's", None, owned(DS), ["DaemonSet"]),
    ("added, the ReplicaSet's", None, owned(RS), ["ReplicaSet"]),
    ("added, another kind's", None, owned(OTHER), []),
    ("added, an orphan", None, owned(None), ["ReplicaSet", "DaemonSet"]),
    ("added, an owner reference that is not a controller's", None, owned(DS, controller=False),
     ["ReplicaSet", "DaemonSet"]),
    ("updated, the DaemonSet's", owned(DS), owned(DS, "2"), ["DaemonSet"]),
    ("updated, released by the ReplicaSet", owned(RS), owned(None, "2"), ["ReplicaSet", "DaemonSet"]),
    ("updated, adopted by the DaemonSet", owned(None), owned(DS, "2"), ["DaemonSet"]),
    ("updated, from the ReplicaSet to the DaemonSet", owned(RS), owned(DS, "2"), ["ReplicaSet", "DaemonSet"]),
    ("updated, from another kind to the ReplicaSet", owned(OTHER), owned(RS, "2"), ["ReplicaSet"]),
    ("updated, from the DaemonSet to another kind", owned(DS), owned(OTHER, "2"), ["DaemonSet"]),
    ("updated, another kind's", owned(OTHER), owned(OTHER, "2"), []),
    ("deleted, the DaemonSet's", owned(DS), None, ["DaemonSet"]),
    ("deleted, the ReplicaSet's", owned(RS), None, ["ReplicaSet"]),
    ("deleted, an orphan", owned(None), None, []),
]
IDS = [case[0] for case in CASES]


@dataclass
class Recording:
    """Stands in for one controller's OwnerHandlers: records the changes handed to it."""

    kind_name: str
    calls: list[str] = field(default_factory=list)

    def on_concerning_pod(self, change: Change, view: CacheView, wakeups: Wakeups) -> None:
        self.calls.append(self.kind_name)


@pytest.mark.parametrize(("old", "new", "kinds"), [case[1:] for case in CASES], ids=IDS)
def test_a_pod_change_runs_the_handlers_of_the_kinds_it_concerns(old: Pod | None, new: Pod | None,
                                                                 kinds: list[str]) -> None:
    calls: list[str] = []
    owners = [Recording("ReplicaSet", calls), Recording("DaemonSet", calls)]
    pod_handler(cast(list[OwnerHandlers[Any]], owners))(change(old, new), Cache(), Wakeups())
    assert calls == kinds
    # what each controller's own handler decides for itself: the dispatcher skips no change it would handle
    assert [kind for kind in ("ReplicaSet", "DaemonSet") if not _foreign(new, old, kind)] == kinds


def _wakeups(handle: Any, view: Cache, old: Pod | None, new: Pod | None) -> Wakeups:
    wakeups = Wakeups()
    handle(change(old, new), view, wakeups)
    return wakeups


@pytest.mark.parametrize(("old", "new"), [case[1:3] for case in CASES], ids=IDS)
def test_one_pod_handler_wakes_what_both_controllers_handlers_did(old: Pod | None, new: Pod | None) -> None:
    view = cache_of(DS, RS)
    both = pod_handler([rs_handlers.HANDLERS, ds_handlers.HANDLERS])

    def one_by_one(c: Change, v: CacheView, w: Wakeups) -> None:
        rs_handlers.on_pod(c, v, w)
        ds_handlers.on_pod(c, v, w)

    assert _wakeups(both, view, old, new) == _wakeups(one_by_one, view, old, new)


def test_the_dispatcher_runs_one_pod_handler_for_every_controller() -> None:
    controllers = Controllers(cache_of(DS, RS))
    (handle,) = controllers._handlers["Pod"]
    wakeups = _wakeups(handle, controllers.cache, None, owned(None))
    # an orphan matching both owners wakes both, the ReplicaSet first as before
    assert [str(key) for key in wakeups.enqueue] == ["ReplicaSet/default/rs", "DaemonSet/default/ds"]
