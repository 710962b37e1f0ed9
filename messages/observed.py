"""What ingest saw: one message per watch event, in the past tense.

The object travels as the API's own JSON (`msgspec.Raw`), so a consumer decodes it straight into
the `kube` model it needs, and a replay sees exactly the bytes the API sent.
"""

from __future__ import annotations

from typing import Final

import msgspec

SCHEMA_VERSION: Final = 1

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
# synthetic events, published after a relist (the informer's resync and DeletedFinalStateUnknown)
RELISTED: Final = "RELISTED"
DELETED_FINAL_STATE_UNKNOWN: Final = "DELETED_FINAL_STATE_UNKNOWN"
# an object ingest could not decode: kept on the bus with the error, never handed to a controller
QUARANTINED: Final = "QUARANTINED"


class ObservedEvent(msgspec.Struct, kw_only=True, frozen=True, tag_field="msg", tag="observed"):
    v: int = SCHEMA_VERSION
    kind: str
    type: str
    namespace: str = ""
    name: str
    uid: str
    resource_version: str
    observed_at: str
    ingest: str
    object: msgspec.Raw
    error: str | None = None

    @property
    def msg_id(self) -> str:
        """The JetStream de-duplication id: two ingest replicas publish each event once."""
        return f"{self.kind}/{self.uid}/{self.resource_version}/{self.type}"

    @property
    def is_deletion(self) -> bool:
        return self.type in (DELETED, DELETED_FINAL_STATE_UNKNOWN)
