"""After the kills: restart the cache on the folder, count what is left over, and check
every stored take against a fresh render.

The survey looks at the folder from outside (names on disk, rows in the index read with
plain ``sqlite3``), not through the tier's own bookkeeping, so a tier that is wrong about
itself is still caught. A figure it cannot measure is ``None``, never a guess.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from voxcache import Cache, CacheConfig, CachedEngine

from .workload import Workload, fresh_render, same_take

PUBLISHED = re.compile(r"^[0-9a-f]{64}\.(wav|vxc)$")
KEY_LOCK = re.compile(r"^[0-9a-f]{64}\.lock$")
TEMP_MARK = ".tmp-"
"""How voxcache names files it has not published yet (writes and the start-up probe)."""


@dataclass(frozen=True, slots=True)
class Survey:
    """What is in a cache folder, counted from the names on disk and the index rows."""

    entries: dict[str, Path]
    """Published entry files by key."""
    temp_files: int
    """Unpublished write files under ``objects/`` (a dead writer's; swept at start)."""
    root_temp_files: int
    """Temp files anywhere else (e.g. the write probe a process makes as it opens the
    folder)."""
    stray_files: int
    """Other files under ``objects/`` that are neither entries nor temp files."""
    key_lock_files: int
    """Per-key lock files (``locks/ab/<key>.lock``); with no process running, every one is
    orphaned (the holder unlinks its own before releasing it)."""
    named_lock_files: int
    """Other files under ``locks/`` (fixed-name locks kept on purpose; not leftovers)."""
    quarantined: int
    """Files moved to ``quarantine/`` (entries that failed verification)."""
    index_keys: set[str] | None
    """Keys with an index row, or None when the index could not be read."""

    def figures(self) -> dict[str, Any]:
        """The counts (no file lists), with index/file mismatches."""
        rows_without_files = files_without_rows = None
        if self.index_keys is not None:
            rows_without_files = len(self.index_keys - set(self.entries))
            files_without_rows = len(set(self.entries) - self.index_keys)
        return {"entries": len(self.entries), "temp_files": self.temp_files,
                "root_temp_files": self.root_temp_files, "stray_files": self.stray_files,
                "key_lock_files": self.key_lock_files,
                "named_lock_files": self.named_lock_files,
                "quarantined": self.quarantined, "index_rows": (
                    None if self.index_keys is None else len(self.index_keys)),
                "index_rows_without_files": rows_without_files,
                "files_without_index_rows": files_without_rows}


def survey(root: Path) -> Survey:
    """Count entries, leftovers and index rows in a cache folder nobody is using."""
    entries: dict[str, Path] = {}
    counts = dict.fromkeys(("temp", "root_temp", "stray", "key_lock", "named_lock"), 0)
    for folder, _dirs, files in os.walk(root):
        place = Path(folder).relative_to(root).parts[:1]
        for name in files:
            if place == ("objects",):
                if name.startswith(TEMP_MARK):
                    counts["temp"] += 1
                elif PUBLISHED.match(name):
                    entries[name[:64]] = Path(folder) / name
                else:
                    counts["stray"] += 1
            elif name.startswith(TEMP_MARK):
                counts["root_temp"] += 1
            elif place == ("locks",):
                counts["key_lock" if KEY_LOCK.match(name) else "named_lock"] += 1
    return Survey(entries=entries, temp_files=counts["temp"],
                  root_temp_files=counts["root_temp"], stray_files=counts["stray"],
                  key_lock_files=counts["key_lock"], named_lock_files=counts["named_lock"],
                  quarantined=sum(len(files) for _f, _d, files in os.walk(root / "quarantine")),
                  index_keys=_index_keys(root / "index.sqlite3"))


def _index_keys(path: Path) -> set[str] | None:
    """Keys of the index's rows, read with plain sqlite3 (None if unreadable)."""
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            return {row[0] for row in db.execute("SELECT key FROM entries")}
        finally:
            db.close()
    except sqlite3.Error:
        return None


def restart(root: Path) -> None:
    """What a process start does to the folder: open a ``Cache`` (it sweeps temp files of
    dead writers and reconciles the index in the background) and close it, which waits for
    that check to finish."""
    Cache(root).close()


@dataclass(slots=True)
class Verification:
    """Every stored take checked against a fresh render."""

    stored: int = 0
    verified: int = 0
    """Served by ``Cache.get`` with exactly the fresh render's samples."""
    mismatched: int = 0
    """Served, but with other samples: a wrong or torn take (must be 0)."""
    not_served: int = 0
    """Refused by ``Cache.get`` (it failed verification and was quarantined)."""
    unknown: int = 0
    """Files under a key no request of the run has (must be 0)."""
    mismatched_keys: tuple[str, ...] = ()

    def figures(self) -> dict[str, Any]:
        """The counts, and up to ten keys that did not match."""
        return {**asdict(self), "mismatched_keys": list(self.mismatched_keys[:10])}


def key_map(workload: Workload, cached: CachedEngine, ids: list[int]) -> dict[str, int]:
    """Key of every request id the run may have stored."""
    return {cached.resolve_and_key(workload.request(rid))[1]: rid for rid in ids}


def verify(root: Path, workload: Workload, ids: list[int]) -> Verification:
    """Read every stored take through a fresh ``Cache`` (memory budget 0: straight from the
    files) and compare its samples with a fresh render of its request."""
    cache = Cache(root, CacheConfig(memory_default_budget=0))
    try:
        cached = CachedEngine(workload.engine(), cache)
        keys = key_map(workload, cached, ids)
        result = Verification()
        mismatched: list[str] = []
        for key in sorted(survey(root).entries):
            result.stored += 1
            rid = keys.get(key)
            if rid is None:
                result.unknown += 1
                continue
            found = cache.get(key)
            if found is None:
                result.not_served += 1
            elif same_take(found[0], fresh_render(workload, cached, rid)):
                result.verified += 1
            else:
                result.mismatched += 1
                mismatched.append(key)
        result.mismatched_keys = tuple(mismatched)
        return result
    finally:
        cache.close()
