"""Which stored entries a pack carries: a selection over the index's columns.

Voice, tenant and model revision match the index exactly (as ``voxcache ls``
shows them); ``top`` takes the N most-hit entries (the phrases worth shipping
first); ``newer_than``/``older_than`` bound the age. Expired entries are never
selected. The index is an accelerator and may lag the files by a flush; the
exporter reads and verifies every selected file, so a row whose file is gone is
dropped there, never shipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..tiers.index import IndexRow


@dataclass(frozen=True, slots=True)
class Selection:
    """What to put in a pack (every field narrows it; none selects everything)."""

    voices: tuple[str, ...] = ()
    tenant: str | None = None
    revision: str | None = None
    top: int | None = None
    newer_than: float | None = None
    """Seconds: only entries created at most this long ago."""
    older_than: float | None = None

    def describe(self) -> dict[str, Any]:
        """The selection as recorded in a manifest (and sent to a center by ``pack pull``)."""
        return {k: v for k, v in {
            "voices": list(self.voices) or None, "tenant": self.tenant,
            "revision": self.revision, "top": self.top, "newer_than": self.newer_than,
            "older_than": self.older_than}.items() if v is not None}

    def where(self, now: float) -> tuple[str, list[Any]]:
        """The SQL condition and its arguments."""
        clauses = ["(expires IS NULL OR expires > ?)"]
        args: list[object] = [now]
        if self.voices:
            clauses.append(f"voice IN ({','.join('?' * len(self.voices))})")
            args += list(self.voices)
        for column, value in (("tenant", self.tenant), ("model", self.revision)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if self.newer_than is not None:
            clauses.append("created >= ?")
            args.append(now - self.newer_than)
        if self.older_than is not None:
            clauses.append("created <= ?")
            args.append(now - self.older_than)
        return " AND ".join(clauses), args

    def rows(self, disk: Any, now: float | None = None) -> list[IndexRow] | None:
        """The selected rows of a disk tier's index, most-hit first under ``top``, else
        oldest first; None while the index cannot answer (``DiskTier.rows`` fails open)."""
        where, args = self.where(time.time() if now is None else now)
        order = "hits DESC, last_access DESC" if self.top else "created ASC, key ASC"
        return disk.rows(where, tuple(args), order, self.top or -1)
