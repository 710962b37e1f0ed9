"""What ingest has done, as plain counters: the lead's /metrics renders them."""

from __future__ import annotations

from collections import Counter
from typing import Any


class Counters:
    def __init__(self) -> None:
        self.published: Counter[tuple[str, str]] = Counter()  # (kind, type) -> newly stored events
        self.duplicates: Counter[str] = Counter()  # kind -> publishes JetStream de-duplicated
        self.publish_retries: Counter[str] = Counter()  # kind -> publishes resent after a failure
        # kind -> events not published because the stream already held a newer state of the object, or its
        # deletion: another replica published first (with two replicas, most of the slower one's events), or
        # this one is back from an outage with events the stream has moved past (ingest/publishing.py)
        self.superseded: Counter[str] = Counter()
        self.quarantined: Counter[str] = Counter()
        self.compressed: Counter[str] = Counter()  # kind -> events published compressed (over max_payload)
        self.too_large: Counter[str] = Counter()  # kind -> objects too large even compressed (quarantined)
        self.unroutable: Counter[str] = Counter()  # objects without a uid: logged, not published
        self.lists: Counter[str] = Counter()  # kind -> full lists (start without checkpoint, 410 Gone)
        self.gone: Counter[str] = Counter()  # kind -> 410 Gone answers that forced a relist
        self.api_reconnects: Counter[str] = Counter()  # kind -> watches re-opened after an error
        self.last_rv: dict[str, str] = {}  # kind -> resourceVersion up to which all events are acked
        self.watching: dict[str, bool] = {}

    def snapshot(self, nats_reconnects: int = 0) -> dict[str, Any]:
        by_kind: dict[str, dict[str, int]] = {}
        for (kind, event_type), n in sorted(self.published.items()):
            by_kind.setdefault(kind, {})[event_type] = n
        return {
            "published": by_kind,
            "published_total": sum(self.published.values()),
            "duplicates": dict(self.duplicates),
            "duplicates_total": sum(self.duplicates.values()),
            "publish_retries": dict(self.publish_retries),
            "superseded": dict(self.superseded),
            "superseded_total": sum(self.superseded.values()),
            "quarantined": dict(self.quarantined),
            "compressed": dict(self.compressed),
            "too_large": dict(self.too_large),
            "unroutable": dict(self.unroutable),
            "lists": dict(self.lists),
            "relists": sum(self.lists.values()),
            "gone": dict(self.gone),
            "api_reconnects": dict(self.api_reconnects),
            "nats_reconnects": nats_reconnects,
            "last_resource_version": dict(self.last_rv),
            "watching": dict(self.watching),
        }
