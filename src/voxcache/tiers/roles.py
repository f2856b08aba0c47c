"""What a cache asks of a tier by its role, never by its name.

``Cache`` needs one tier private to this process (memory: peeks, pins, a clear) and one
that is this machine's cache folder (disk: the index, pins, counters, faults); the rest
are shared across nodes. A tier says its role with a ``role`` attribute; without one, a
durable tier is shared and any other is private to the process.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from ..entry import Entry
from .base import Tier
from .faults import FaultLog
from .index import Index


class TierRole(StrEnum):
    """Where a tier's entries live, which decides what the cache asks of it."""

    PROCESS = "process"
    FOLDER = "folder"
    SHARED = "shared"


def role_of(tier: Tier) -> TierRole:
    """``tier.role``, or what its durability implies."""
    role = getattr(tier, "role", None)
    if role is not None:
        return TierRole(role)
    return TierRole.SHARED if tier.durable else TierRole.PROCESS


def with_role(tiers: Iterable[Tier], role: TierRole) -> list[Tier]:
    """The tiers of ``tiers`` in ``role``, in their order."""
    return [tier for tier in tiers if role_of(tier) is role]


class ProcessTier(Tier, Protocol):
    """The tier private to this process (the memory tier)."""

    def peek(self, key: str, kind: str = "audio") -> Entry | None:
        """The entry without touching its recency."""

    def touch(self, key: str, kind: str = "audio") -> None:
        """Mark the entry recently used."""

    def set_pinned(self, key: str, pinned: bool) -> None:
        """Keep (or stop keeping) ``key`` through memory pressure."""

    def clear(self) -> None:
        """Drop everything held."""


class FolderTier(Tier, Protocol):
    """The cache folder of this machine (the disk tier): the index and what it records."""

    root: Path
    index: Index
    """The folder's index."""
    faults: FaultLog

    def is_pinned(self, key: str) -> bool: ...
    def owner(self, key: str) -> str | None: ...
    def pin(self, key: str, pinned: bool = True, until: float | None = None) -> bool: ...
    def children(self, key: str) -> list[tuple[str, str]]: ...
    def note_hit(self, key: str, now: float | None = None) -> None: ...
    def read_stored(self, key: str, kind: str = "audio") -> bytes | None: ...
    def path_of(self, key: str, kind: str = "audio") -> Path: ...
    def rows(self, where: str = "1", args: tuple[object, ...] = (),
             order: str = "last_access DESC", limit: int = -1) -> list[Any] | None: ...
    def count(self, name: str, delta: int = 1) -> None: ...
    def counters(self) -> dict[str, int] | None: ...
    def totals(self) -> tuple[int, int] | None: ...
    def flush(self, wait: float | None = None) -> None: ...
    def index_fault(self, what: str, exc: BaseException) -> None: ...
    def start_repair(self) -> bool: ...
    def settle(self) -> None: ...
