"""A center publishing packs over HTTP: build a signed pack for a selection, keep it to be
downloaded (and resumed), and answer deltas against what an edge already has.

Each build records its selection as a snapshot (``packs/snapshots/<digest>.json``); a pack
carries what the edge's ``base`` snapshot lacks (the whole selection for an unknown base),
so deltas need no chain. Packs are spooled to ``packs/spool/<digest>.vxpack`` and served
as immutable files (Range resumes). docs/operating/edge.md, "Publishing: a center serving packs".
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..cache import Cache
from ..errors import NotFound
from ..fsmode import private_dirs, write_private
from .exporter import plan, provenance, select_rows, write
from .manifest import DIGEST, Manifest, digest
from .select import Selection
from .signing import SigningKey

SPOOL = Path("packs") / "spool"
SNAPSHOTS = Path("packs") / "snapshots"
SPOOL_SECONDS = 24 * 3600.0
SNAPSHOT_SECONDS = 30 * 24 * 3600.0
MAX_SPOOLED = 64


class Publisher:
    """Builds and keeps packs in one cache folder, signed with one key."""

    def __init__(self, cache: Cache, key: SigningKey,
                 identity: Callable[[], Mapping[str, Any]]) -> None:
        self.cache = cache
        self.key = key
        self.identity = identity
        self.root = Path(cache.root)
        self._prune_lock = threading.Lock()

    def build(self, selection: Selection, base: str | None) -> dict[str, Any]:
        """Build (sign, spool) the pack for ``selection`` minus snapshot ``base``."""
        rows = select_rows(self.cache, selection)
        known = self._snapshot_keys(base) if base else None
        wanted = [row for row in rows if known is None or row.key not in known]
        lines, left_out = plan(self.cache, wanted)
        covered = sorted((row.key, row.created) for row in rows if row.key not in left_out)
        snapshot = self._save_snapshot(selection, covered)
        manifest = Manifest(tuple(lines), selection=selection.describe(),
                            engine=dict(self.identity()), snapshot=snapshot,
                            base=None if known is None else {"digest": base,
                                                             "entries": len(known)},
                            **provenance(self.cache, self.key, selection))
        private_dirs(self.root / SPOOL)
        temp = self.root / SPOOL / f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                exported = write(self.cache, manifest, self.key, out)
            os.replace(temp, self.path(exported.digest, must_exist=False))
        finally:
            temp.unlink(missing_ok=True)
        self.prune()
        return {**exported.describe(), "left_out": left_out, "snapshot": snapshot,
                "base": base if known is not None else None,
                "base_unknown": bool(base) and known is None,
                "url": f"/v1/packs/{exported.digest}",
                "size": self.path(exported.digest).stat().st_size}

    def path(self, pack: str, must_exist: bool = True) -> Path:
        """The spooled file of pack ``pack`` (a manifest digest)."""
        if not DIGEST.fullmatch(pack):
            raise NotFound(f"no pack {pack!r}: a pack is named by 64 hex digits")
        path = self.root / SPOOL / f"{pack}.vxpack"
        if must_exist and not path.is_file():
            raise NotFound(f"no pack {pack} here (never built, or pruned after "
                           f"{SPOOL_SECONDS / 3600:.0f} h): ask for a new one (POST /v1/packs)")
        return path

    def _save_snapshot(self, selection: Selection, covered: list[tuple[str, float]]) -> str:
        doc = json.dumps({"selection": selection.describe(), "entries": covered},
                         sort_keys=True, separators=(",", ":")).encode()
        name = digest(doc)
        path = self.root / SNAPSHOTS / f"{name}.json"
        if not path.exists():
            private_dirs(path.parent)
            write_private(path, doc)
        else:
            os.utime(path)  # in use: keep it from being pruned
        return name

    def _snapshot_keys(self, base: str) -> set[str] | None:
        """The keys of snapshot ``base``; None when it is unknown here (the pack is whole)."""
        if not DIGEST.fullmatch(base):
            raise NotFound(f"base {base!r} is not a snapshot digest (64 hex digits)")
        try:
            doc = json.loads((self.root / SNAPSHOTS / f"{base}.json").read_bytes())
        except (OSError, ValueError):
            return None
        return {key for key, _created in doc.get("entries", [])}

    def prune(self, now: float | None = None) -> int:
        """Drop spooled packs and snapshots past their keeping time; return how many."""
        now = time.time() if now is None else now
        removed = 0
        with self._prune_lock:
            for folder, keep, most in ((SPOOL, SPOOL_SECONDS, MAX_SPOOLED),
                                       (SNAPSHOTS, SNAPSHOT_SECONDS, None)):
                files = sorted(_aged(self.root / folder), reverse=True)
                for rank, (mtime, path) in enumerate(files):
                    if now - mtime > keep or (most is not None and rank >= most):
                        path.unlink(missing_ok=True)
                        removed += 1
        return removed


def _aged(folder: Path) -> list[tuple[float, Path]]:
    """(mtime, path) of the finished files in ``folder`` (temp files are the sweep's)."""
    found = []
    for path in folder.glob("*"):
        if path.name.startswith(".tmp-"):
            continue
        try:
            found.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    return found
