"""Pack sequences: a publisher's packs are numbered, and an importer never goes back.

A publisher issues ``max(last issued + 1, now in ms)``; an importer records per signing
key the highest sequence it admitted (index table ``pack_sequences``) and refuses a lower
one — an older pack could bring back what a newer one's tombstones removed (TUF's rollback
attack, §5.4). The same pack again is admitted, so a cut-short import resumes.
docs/operating/edge.md, "Purges and rollback".
"""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime

from ..errors import InvalidParameter
from ..tiers.index import Index

MAX_SEQUENCE = 2**63 - 1


class StalePack(InvalidParameter):
    """A pack older than one already admitted from the same publisher (nothing imported)."""


def issue(index: Index, key_id: str, now: float | None = None) -> int:
    """The sequence of the next pack signed with ``key_id`` here (recorded as seen)."""
    clock = int((time.time() if now is None else now) * 1000)
    with index.transaction() as db:
        row = db.execute("SELECT sequence FROM pack_sequences WHERE key_id = ?",
                         (key_id,)).fetchone()
        sequence = max(clock, (row[0] + 1) if row else 0)
        _store(db, key_id, sequence, "", time.time())
    return sequence


def admit(index: Index, key_id: str, sequence: int, digest: str) -> None:
    """Record that pack ``digest`` (``sequence``, signed by ``key_id``) is being imported;
    raise ``StalePack`` when a newer pack from that key was admitted before."""
    with index.transaction() as db:
        row = db.execute("SELECT sequence, digest, at FROM pack_sequences WHERE key_id = ?",
                         (key_id,)).fetchone()
        if row is not None and sequence < row[0]:
            newer = f"pack {row[1][:12]}" if row[1] else "a pack"
            raise StalePack(
                f"pack {digest[:12]} signed by key {key_id} is older (sequence {sequence}, "
                f"signed {_when(sequence)}) than {newer} already taken from that key "
                f"(sequence {row[0]}, signed {_when(row[0])}): an older pack could bring "
                "back what a newer one or a purge removed, so nothing was imported — ask "
                "the publisher for a new pack")
        if row is None or sequence > row[0] or not row[1]:
            _store(db, key_id, sequence, digest, time.time())


def _store(db: sqlite3.Connection, key_id: str, sequence: int, digest: str, at: float
           ) -> None:
    db.execute(
        "INSERT INTO pack_sequences VALUES (?, ?, ?, ?) ON CONFLICT(key_id) DO UPDATE SET "
        "sequence = excluded.sequence, digest = excluded.digest, at = excluded.at",
        (key_id, sequence, digest, at))


def _when(sequence: int) -> str:
    """A sequence as the time it stands for (sequences are milliseconds since 1970)."""
    try:
        return datetime.fromtimestamp(sequence / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "at an unknown time"
