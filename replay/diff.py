"""`kubus replay --diff`: the replayed decisions against the recorded ones, up to the first divergence.

Two decisions are the same when they agree on the controller, the correlation id (which holds the last
event sequence the controllers had seen and the clock), the event sequence and trigger, the summary
(compared as stored: JSON) and the actions, key by key and field by field (the decision id, which the
database assigns, aside). Ticks are compared in order, decisions in the order they were committed. At a
restart the replay also compares what the new process loaded (consumer positions, expectations, failed-pod
backoff) with what the replay's copy of the store holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from messages import codec
from reconciler.core.batch import Stored
from reconciler.core.controllers import Decided
from reconciler.core.ticks import state_of
from replay.bundles import Bundle, RecordedDecision

_json = msgspec.json.Encoder()


@dataclass(frozen=True)
class Divergence:
    tick: int
    at: datetime
    line: int  # the tick's line in the file, 0 when not from a file
    index: int  # the decision's place among the tick's decisions (-1: the restart's loaded state)
    controller_key: str
    correlation_id: str  # the recorded decision's ("" when the replay decided more)
    what: str  # where they differ first, and how
    recorded: Any = None
    replayed: Any = None

    def describe(self) -> str:
        where = f"tick {self.tick}" + (f" (line {self.line})" if self.line else "") + f" at {self.at.isoformat()}"
        if self.index < 0:
            return f"first divergence at {where}, a restart: {self.what}"
        who = f"{self.controller_key} ({self.correlation_id})" if self.correlation_id else self.controller_key
        return f"first divergence at {where}, decision {self.index + 1}: {who}: {self.what}"


def normalized(value: Any) -> Any:
    """A value as the store's JSON gives it back."""
    return msgspec.json.decode(_json.encode(value))


def action_fields(payload: bytes) -> dict[str, Any]:
    fields = msgspec.json.decode(payload)
    if isinstance(fields, dict):
        fields.pop("decision_id", None)
        return fields
    return {"payload": fields}


def replayed_fields(decided: Decided) -> dict[str, Any]:
    return {
        "controller_key": decided.controller_key, "controller_kind": decided.controller_kind,
        "correlation_id": decided.correlation_id, "stream_seq": decided.stream_seq, "trigger": decided.trigger,
        "summary": normalized(decided.summary),
        "actions": sorted([a.key, action_fields(codec.encode(a))] for a in decided.actions),
    }


def recorded_fields(decision: RecordedDecision) -> dict[str, Any]:
    return {
        "controller_key": decision.controller_key, "controller_kind": decision.controller_kind,
        "correlation_id": decision.correlation_id, "stream_seq": decision.stream_seq, "trigger": decision.trigger,
        "summary": normalized(decision.summary),
        "actions": sorted([a.key, action_fields(a.payload)] for a in decision.actions),
    }


def first_difference(recorded: Any, replayed: Any, path: str = "") -> str | None:
    """The first path where two JSON values differ, with both values; None when equal."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in sorted(set(recorded) | set(replayed), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in recorded:
                return f"{sub}: not recorded, replayed {_short(replayed[key])}"
            if key not in replayed:
                return f"{sub}: recorded {_short(recorded[key])}, not replayed"
            found = first_difference(recorded[key], replayed[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(recorded) != len(replayed):
            return f"{path}: recorded {len(recorded)} items {_short(recorded)}, replayed {len(replayed)} " \
                   f"{_short(replayed)}"
        return None
    if recorded != replayed or type(recorded) is not type(replayed):
        return f"{path}: recorded {_short(recorded)}, replayed {_short(replayed)}"
    return None


def _short(value: Any, limit: int = 200) -> str:
    text = _json.encode(value).decode()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def same(recorded: RecordedDecision, replayed: Decided) -> bool:
    """The fast check: the fields, then the summary as JSON, then each action's bytes (an action is
    encoded exactly as the live reconciler encoded it, its decision id the recorded one)."""
    if (recorded.correlation_id != replayed.correlation_id or recorded.controller_key != replayed.controller_key
            or recorded.stream_seq != replayed.stream_seq or recorded.trigger != replayed.trigger
            or recorded.controller_kind != replayed.controller_kind
            or len(recorded.actions) != len(replayed.actions)):
        return False
    if recorded.summary != normalized(replayed.summary):
        return False
    mine = sorted(replayed.actions, key=lambda a: a.key)
    for theirs, action in zip(sorted(recorded.actions, key=lambda a: a.key), mine, strict=True):
        if theirs.key != action.key:
            return False
        if theirs.payload != codec.encode(msgspec.structs.replace(action, decision_id=recorded.id)) and \
                action_fields(theirs.payload) != action_fields(codec.encode(action)):
            return False
    return True


def compare_decisions(bundle: Bundle, replayed: list[Decided]) -> Divergence | None:
    recorded = bundle.decisions or []
    tick = bundle.tick
    assert tick.id is not None
    for index in range(max(len(recorded), len(replayed))):
        rec = recorded[index] if index < len(recorded) else None
        rep = replayed[index] if index < len(replayed) else None
        if rec is not None and rep is not None and same(rec, rep):
            continue
        rec_fields = None if rec is None else recorded_fields(rec)
        rep_fields = None if rep is None else replayed_fields(rep)
        if rec_fields is None:
            assert rep is not None
            return Divergence(tick.id, tick.at, bundle.line_in_file, index, rep.controller_key, "",
                              f"the replay decided more: {rep.correlation_id} was never recorded", None, rep_fields)
        if rep_fields is None:
            assert rec is not None
            return Divergence(tick.id, tick.at, bundle.line_in_file, index, rec.controller_key, rec.correlation_id,
                              "recorded, but the replay did not decide it", rec_fields, None)
        what = first_difference(rec_fields, rep_fields)
        if what is not None:
            assert rec is not None
            return Divergence(tick.id, tick.at, bundle.line_in_file, index, rec.controller_key, rec.correlation_id,
                              what, rec_fields, rep_fields)
    return None



def compare_state(bundle: Bundle, replayed: Stored, recorded: Stored) -> Divergence | None:
    """What a restarted reconciler loaded, against the replay's copy of the store at that point."""
    what = first_difference(_state_json(recorded), _state_json(replayed))
    if what is None:
        return None
    tick = bundle.tick
    assert tick.id is not None
    return Divergence(tick.id, tick.at, bundle.line_in_file, -1, "", "", f"loaded {what}")


def _state_json(stored: Stored) -> dict[str, Any]:
    return state_of(stored.positions, stored.expectations, stored.backoff)
