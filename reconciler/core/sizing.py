"""Actions cut to fit one bus message: NATS refuses a message larger than its server's max_payload (1 MiB
by default), and a CreatePods carries every pod it creates (a ReplicaSet of 500 pods with a 3 KB-larger
template is 1.28 MB; a DaemonSet on a thousand nodes more).

Why here, in the planning, rather than in the outbox relay: each part is an action of its own, with its
own key, committed in the decision's transaction as its own outbox row, taken by whichever executor is
free, and reported by the results as today (one per pod); the expectations and the round count pods, not
actions, so they are the same whether the pods travel in one action or several. The relay only publishes
rows, never has to rewrite one (which would split a row's idempotency across messages), and the audit
trail shows the actions the executors received. The limit is one of the controllers' settings, recorded
with every reconciler start, so `kubus replay` cuts the same actions where the live loop did.

What still does not fit once alone (a single pod, status or revision larger than the limit) is left as it
is: the relay dead-letters it with a failed result the controllers read (reconciler/relaying.py).

A part runs upstream's slow start (1, 2, 4, ... pods, stopping after a batch with a failure) on its own
pods: an API that refuses every create costs one failed create per part, not one in all.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from messages.actions import Action, CreatePods

_encode = msgspec.json.encode


def part_key(key: str, index: int) -> str:
    """The key of a CreatePods's part `index` (0-based): the first keeps the action's own key, so an action
    that needs no cutting is what it always was; the others are `<key>/2`, `<key>/3`, ..."""
    return key if index == 0 else f"{key}/{index + 1}"


def fit_actions(actions: Sequence[Action], limit: int | None) -> list[Action]:
    """`actions` with each CreatePods whose encoding is over `limit` bytes cut into parts that are not (None:
    no limit, as before kubus knew one); every other action as it is."""
    if limit is None:
        return list(actions)
    out: list[Action] = []
    for action in actions:
        if isinstance(action, CreatePods) and len(action.pods) > 1:
            out.extend(split_create_pods(action, limit))
        else:
            out.append(action)
    return out


def split_create_pods(action: CreatePods, limit: int) -> list[CreatePods]:
    """`action` cut, in order, into the fewest consecutive parts whose encoding is at most `limit` bytes
    each (greedy: a part takes pods while the next still fits); a pod too large on its own is a part alone.
    The sizes are the exact JSON lengths (the envelope counted with the longest part key)."""
    pods = action.pods
    costs = [len(_encode(pod)) + 1 for pod in pods]  # each pod's JSON and the comma before the next
    if len(_encode(msgspec.structs.replace(action, pods=[]))) + sum(costs) - 1 <= limit:
        return [action]
    envelope = len(_encode(msgspec.structs.replace(action, key=part_key(action.key, len(pods)), pods=[])))
    parts: list[list[int]] = [[]]
    used = envelope - 1  # the first pod of a part has no comma
    for index, cost in enumerate(costs):
        if parts[-1] and used + cost > limit:
            parts.append([])
            used = envelope - 1
        parts[-1].append(index)
        used += cost
    return [msgspec.structs.replace(action, key=part_key(action.key, n), pods=[pods[i] for i in part])
            for n, part in enumerate(parts)]
