"""The outbox rows a reconciler's loop committed, handed to the outbox relay in memory (reconciler.relaying).

After a commit the relay has the rows it must publish without reading them back from the table: a scan per commit
(a read transaction, every row's payload read and decoded by the database driver) becomes a list handed over.
The rows are those the store wrote, as its transaction kept them (`queued`: only the rows whose key was new, as
the insert-or-ignore kept them), so what is published is byte for byte what a scan would have read.
"""

from __future__ import annotations

from datetime import datetime

from store.outbox import OutboxRow


class Outgoing:
    """The outbox rows the reconciler's loop committed and the relay has not taken yet, handed over in memory so
    that a round after a commit needs no scan of the table (see the module's docstring). `complete`: every
    pending row of the table is either here or being published by the round in flight; false until a scan
    found them all, and again after a commit whose rows may be in the table but not here, or a failed round."""

    def __init__(self) -> None:
        self.complete = False
        self._rows: list[OutboxRow] = []
        self._scanned: set[str] = set()  # the keys the last scanning round took, of rows perhaps handed after it

    def hand(self, rows: list[OutboxRow]) -> None:
        """The rows of a commit, once it committed."""
        self._rows.extend(rows)

    def lost(self) -> None:
        """A commit (or a round) left rows in the table that are not here: the next round scans."""
        self.complete = False

    def scanning(self) -> None:
        """A scanning round begins: its scans read every pending row of the table, the rows handed so far too."""
        self.complete = True
        self._rows.clear()
        self._scanned.clear()

    def scanned(self, rows: list[OutboxRow]) -> None:
        """What a scan found: those handed over too (their commit landed between `scanning` and the read, or the
        loop handed them just after the read saw them) are published by the scan's round, not again."""
        keys = {row.key for row in rows}
        self._scanned |= keys
        self._rows = [row for row in self._rows if row.key not in keys]

    def take(self) -> list[OutboxRow]:
        """The rows handed since the last take, in the scan's order: creation, then key."""
        rows, self._rows = self._rows, []
        if self._scanned:
            rows = [row for row in rows if row.key not in self._scanned]
            self._scanned = set()
        rows.sort(key=_scan_order)
        return rows


def _scan_order(row: OutboxRow) -> tuple[datetime, str]:
    return row.created_at, row.key
