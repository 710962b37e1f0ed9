"""The keys the reconciler writes into messages and the store, and the one place each is read back.

    DaemonSet/<namespace>/<name>           a controller's key: its work-queue item, its expectations' row, the
    ReplicaSet/<namespace>/<name>          ``controller`` of its decisions, actions and results
    <controller key>@<seq>~<µs>            a decision's correlation id: the key, the last event sequence the
                                           controllers had seen and the sync's clock in microseconds
    <correlation id>/<step>[/...]          an action's idempotency key: ``create``, ``delete/<uid>``,
                                           ``adopt/<uid>``, ``release/<uid>``, ``status``, ...

These strings are stored and recorded, and recorded histories are replayed byte for byte, so their format
never changes. The reconciler's core parses a key once where it comes in (a result, a stored expectation)
and formats it once where it goes out (a decision, an action, a stored expectation, a correlation id).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, NamedTuple


class ControllerKind(StrEnum):
    """The controllers kubus runs, named by the kind of object each controls (as keys and messages spell it).

    A StrEnum, so that a key hashes and sorts as fast as the strings it holds (a plain Enum member's hash is
    a Python call, and keys are hashed on every event)."""

    DAEMON_SET = "DaemonSet"
    REPLICA_SET = "ReplicaSet"


class ControllerKey(NamedTuple):
    """A controller's key: the kind, namespace and name of the object it syncs (upstream's work-queue key,
    ``namespace/name``, with the kind in front since both controllers share one queue)."""

    kind: ControllerKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}/{self.namespace}/{self.name}"


def parse_controller_key(text: str) -> ControllerKey | None:
    """``Kind/namespace/name`` as a key; None for a string no controller of this kubus writes (a result an
    older kubus's controller left on the bus, an expectation it stored). The name is everything after the
    second slash."""
    kind, _, rest = text.partition("/")
    namespace, slash, name = rest.partition("/")
    if not slash or kind not in _KINDS:
        return None
    return ControllerKey(_KINDS[kind], namespace, name)


_KINDS: Final = {kind.value: kind for kind in ControllerKind}


def correlation_id(key: str, seq: int, at: datetime) -> str:
    """A decision's correlation id: the prefix of every action key it issues, so each effect is named once."""
    return f"{key}@{seq}~{int(at.timestamp() * 1_000_000)}"


# the steps of action keys that something reads back
ADOPT: Final = "adopt"  # a PatchPod adopting an orphan pod: <correlation>/adopt/<pod uid>
STATUS: Final = "status"  # the decision's UpdateStatus: <correlation>/status


def status_key(correlation: str) -> str:
    """The key of the UpdateStatus a decision issues (one per decision at most)."""
    return f"{correlation}/{STATUS}"


def _split_action_key(action_key: str) -> tuple[str, str] | None:
    """(correlation id, what follows its slash) of an action key; None for a key of another form. Neither a
    namespace nor a name holds an ``@``, so the correlation id ends at the first slash after the first ``@``."""
    head, at, after = action_key.partition("@")
    seq_and_time, slash, rest = after.partition("/")
    if not at or not slash:
        return None
    return f"{head}@{seq_and_time}", rest


def correlation_of(action_key: str) -> str:
    """The correlation id an action key starts with: its decision's; "" for a key of another form."""
    split = _split_action_key(action_key)
    return "" if split is None else split[0]


def action_step(action_key: str) -> str:
    """The step an action key names after its correlation id (``adopt``, ``release``, ``create``, ...); "" for
    a key of another form."""
    split = _split_action_key(action_key)
    return "" if split is None else split[1].partition("/")[0]
