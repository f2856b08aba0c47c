"""``pack export``: write the selected entries, exactly as stored, into one signed file.

Two passes: the first verifies and hashes each file (a damaged or expired one is left out
and reported) so the signed manifest, first in the file, names every BLAKE3; the second
writes them, and an entry that changed between passes stops the export. Every pack
carries its signer's next sequence and this node's tombstones. docs/operating/edge.md.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import blake3

from ..cache import Cache
from ..entry import CorruptEntry, EntryHeader, decode
from ..errors import NotFound, Overloaded
from ..tiers import purged
from ..tiers.entry_files import NotAnEntryFile
from ..tiers.index import IndexRow
from .container import MANIFEST, SIGNATURE, PackWriter
from .manifest import Line, Manifest, digest
from .select import Selection
from .sequence import issue
from .signing import SigningKey

Progress = Callable[[int, int], None]
"""Called with (entries done, bytes done) after each entry is written."""


class PackChanged(Overloaded):
    """An entry changed between the two passes of an export (evicted or re-rendered): a
    moment's conflict, so "try again" (503 + Retry-After over HTTP, exit code 1)."""


@dataclass(slots=True)
class Exported:
    """What an export wrote."""

    digest: str
    """BLAKE3 of the manifest: the pack's name."""
    key_id: str
    entries: int
    bytes: int
    left_out: dict[str, str] = field(default_factory=dict)
    """Selected keys that were not shipped, with why (damaged, expired, gone)."""
    sequence: int | None = None
    purged: int = 0
    """Tombstones the pack carries."""

    def describe(self) -> dict[str, Any]:
        """A JSON summary (``pack export --json``, the center's pack descriptor)."""
        return {"digest": self.digest, "signed_by": self.key_id, "entries": self.entries,
                "bytes": self.bytes, "left_out": dict(self.left_out),
                "sequence": self.sequence, "purged": self.purged}


def select_rows(cache: Cache, selection: Selection) -> list[IndexRow]:
    """The index rows a selection names (an error when the index cannot answer)."""
    rows = selection.rows(cache.folder)
    if rows is None:
        raise NotFound("the cache index cannot answer now (locked or being rebuilt); "
                       "try again in a moment")
    return rows


def provenance(cache: Cache, key: SigningKey, selection: Selection) -> dict[str, Any]:
    """The manifest fields that keep an importer from going back: the next sequence of
    ``key`` and the tombstones of this folder (of the selection's tenant, when it names
    one; a purge of another key than the selection's is shipped too: a purge is a purge)."""
    try:
        return {"sequence": issue(cache.index, key.id),
                "purged": tuple(purged.listed(cache.index, selection.tenant))}
    except sqlite3.Error as exc:
        raise NotFound(f"the cache index cannot answer now ({exc}); a pack needs its "
                       "purged keys and sequence — try again in a moment") from None


def plan(cache: Cache, rows: list[IndexRow], *, exclude: set[str] | frozenset[str] = frozenset(),
         now: float | None = None) -> tuple[list[Line], dict[str, str]]:
    """Pass one: verify and hash each selected file; return its manifest lines and what was
    left out (and why)."""
    now = time.time() if now is None else now
    lines, left_out = [], {}
    for row in rows:
        if row.key in exclude:
            continue
        blob, header, reason = _read_verified(cache, row.key, row.kind, now)
        if blob is None or header is None:
            left_out[row.key] = reason
            continue
        meta = header.meta
        lines.append(Line(
            key=row.key, kind=header.kind, size=len(blob), blake3=blake3.blake3(blob).hexdigest(),
            tenant=str(meta.get("tenant") or "default"), pinned=row.pinned,
            created=header.created, expires=header.expires, engine=row.engine, model=row.model,
            voice=row.voice, text=row.text))
    return lines, left_out


def write(cache: Cache, manifest: Manifest, key: SigningKey, out: BinaryIO,
          progress: Progress | None = None) -> Exported:
    """Pass two: the signed manifest first, then every entry it names, re-checked."""
    manifest_bytes = manifest.to_bytes()
    signature = key.sign(manifest_bytes)
    writer = PackWriter(out)
    writer.add(MANIFEST, manifest_bytes, manifest.created)
    writer.add(SIGNATURE, json.dumps(signature, sort_keys=True).encode(), manifest.created)
    done_bytes = 0
    for done, line in enumerate(manifest.lines, 1):
        blob, _, reason = _read_verified(cache, line.key, line.kind, None)
        if blob is None or blake3.blake3(blob).hexdigest() != line.blake3:
            raise PackChanged(f"entry {line.key} changed while the pack was written "
                              f"({reason or 'another take'}); export again", retry_after=1)
        writer.add(line.member, blob, line.created)
        done_bytes += len(blob)
        if progress is not None:
            progress(done, done_bytes)
    writer.close()
    return Exported(digest(manifest_bytes), key.id, len(manifest.lines), done_bytes,
                    sequence=manifest.sequence, purged=len(manifest.purged))


def export_pack(cache: Cache, out: BinaryIO, selection: Selection, key: SigningKey, *,
                exclude: set[str] | frozenset[str] = frozenset(),
                base: Mapping[str, Any] | None = None, snapshot: str | None = None,
                identity: Mapping[str, Any] | None = None,
                progress: Progress | None = None) -> Exported:
    """Select, verify, sign and write a pack; ``exclude`` holds keys the receiver already has
    (a delta, described by ``base``)."""
    lines, left_out = plan(cache, select_rows(cache, selection), exclude=exclude)
    manifest = Manifest(tuple(lines), selection=selection.describe(), engine=identity,
                        base=base, snapshot=snapshot, **provenance(cache, key, selection))
    exported = write(cache, manifest, key, out, progress)
    exported.left_out = left_out
    return exported


def _read_verified(cache: Cache, key: str, kind: str, now: float | None
                   ) -> tuple[bytes | None, EntryHeader | None, str]:
    """The stored file and its header if it verifies (and, with ``now``, has not expired);
    else (None, None, why).

    Read directly, not through the tiers: an export must not count hits or move recency,
    and a damaged file is left for the cache's own next read to quarantine."""
    try:
        blob = cache.folder.read_stored(key, kind)  # a file, or inline for small entries
        if blob is None:
            raise FileNotFoundError(key)
        entry = decode(blob, key)
    except FileNotFoundError:
        return None, None, "gone (evicted or deleted since it was indexed)"
    except (OSError, NotAnEntryFile, CorruptEntry) as exc:
        return None, None, f"damaged: {exc}"
    if now is not None and entry.header.expired(now):
        return None, None, "expired"
    return blob, entry.header, ""
