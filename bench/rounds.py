"""Where a round of creates spends its time, read from a kept benchmark's SQLite store (the audit trail).

    BENCH_KEEP=1 .venv/bin/python -u -m bench.scale_bench --sizes 5000     # prints the kept work directory
    .venv/bin/python -m bench.rounds /tmp/kubus-bench-scale-XXXX/data/kubus.db

A round is one decision that created pods (upstream's burst of up to 250, run by the executor in slow-start
batches); the next round starts at the next such decision of the same controller. Per round, in milliseconds:

- relay: from the batch's clock (decided_at) to the first of its actions acknowledged by JetStream (sent_at):
  the sync, the commit, the outbox scan and the publish;
- execute: from there to the last create's result (the executor's slow start against the API);
- observe: from the last create's result to the last of the round's pods observed by ingest (its ADDED);
- next: from there to the next round's decision: ingest -> NATS -> the reconciler, its batch window and fold.

The medians and totals over the rounds are printed; the first round (the revision's, with its warm-up) is left
out of the medians. Clocks: every timestamp is one machine's wall clock, as the services wrote it.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
from datetime import datetime

ROUNDS = """
SELECT d.id, d.controller_key, d.decided_at,
       (SELECT min(o.sent_at) FROM outbox o WHERE o.decision_id = d.id),
       (SELECT max(r.finished_at) FROM action_results r WHERE r.decision_id = d.id AND r.action = 'create_pods'),
       (SELECT max(e.observed_at) FROM action_results r JOIN observed_events e ON e.uid = r.object_uid
         WHERE r.decision_id = d.id AND r.action = 'create_pods' AND e.event_type = 'ADDED'),
       (SELECT count(*) FROM action_results r WHERE r.decision_id = d.id AND r.action = 'create_pods')
FROM decisions d
WHERE EXISTS (SELECT 1 FROM action_results r WHERE r.decision_id = d.id AND r.action = 'create_pods')
ORDER BY d.controller_key, d.id
"""

PHASES = ("relay", "execute", "observe", "next")


def _at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _ms(later: datetime | None, earlier: datetime | None) -> float | None:
    return None if later is None or earlier is None else (later - earlier).total_seconds() * 1000


def rounds(path: str) -> list[dict[str, float | None]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(ROUNDS).fetchall()
    out: list[dict[str, float | None]] = []
    for i, (_, key, decided, sent, last_result, last_added, pods) in enumerate(rows):
        following = rows[i + 1] if i + 1 < len(rows) and rows[i + 1][1] == key else None
        decided_at, sent_at, result_at, added_at = _at(decided), _at(sent), _at(last_result), _at(last_added)
        out.append({"pods": pods, "relay": _ms(sent_at, decided_at), "execute": _ms(result_at, sent_at),
                    "observe": _ms(added_at, result_at),
                    "next": _ms(_at(following[2]), added_at) if following else None})
    return out


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} KUBUS_DB (a kept benchmark's data/kubus.db)")
    found = rounds(sys.argv[1])
    print(f"{len(found)} rounds, {sum(int(r['pods'] or 0) for r in found):,} pods")
    print("| phase | median ms | total s (all rounds) |")
    print("| --- | --- | --- |")
    for phase in PHASES:
        values = [r[phase] for r in found[1:] if r[phase] is not None]
        every = [r[phase] for r in found if r[phase] is not None]
        median = statistics.median(values) if values else float("nan")
        print(f"| {phase} | {median:.1f} | {sum(v for v in every if v is not None) / 1000:.2f} |")


if __name__ == "__main__":
    main()
