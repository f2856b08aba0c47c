"""``pack import``: verify a pack, then store each entry it names, first writer wins.

Order of trust: the signature (before anything else is read), the pack's sequence (never
an older pack of one publisher), the publisher's tombstones; then each entry must be
exactly what its manifest line says (name, size before a byte is read, BLAKE3, envelope
under the line's key, kind, tenant, not purged here) before it is written with the disk
tier's atomic publish. A failed entry is refused and reported; every manifest line ends
in one list of the report. docs/operating/edge.md, "What an import checks, in order".
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import blake3

from .. import identity
from ..cache import Cache
from ..entry import CorruptEntry, Entry, decode
from ..errors import Overloaded
from ..tiers import purged
from ..tiers.entry_files import NotAnEntryFile
from ..tiers.index import REQUEST_WAIT
from .container import MANIFEST, MAX_SIGNATURE_BYTES, SIGNATURE, BadPack, PackReader
from .manifest import MAX_MANIFEST_BYTES, Line, Manifest, digest, parse
from .sequence import admit
from .signing import PublicKey, UntrustedPack, verify

log = logging.getLogger("voxcache.packs")

Progress = Callable[[int, int, int, int], None]
"""Called with (entries done, entries in the pack, bytes done, bytes in the pack)."""

MAX_STRAYS = 64
"""Members no manifest line names that one import reports before it stops reading: a pack
this tool wrote has none, and each would cost a line of the report (so a file of tiny
members could not grow it without bound)."""


@dataclass(slots=True)
class Imported:
    """What an import did, entry by entry (``pack import --json`` prints it)."""

    digest: str
    signed_by: str
    entries: int
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Already stored here, the same take (an import run again or resumed, or a take this
    edge fetched from the center: same samples, its own envelope)."""
    kept: list[str] = field(default_factory=list)
    """Another take was already stored under the key here: first writer wins."""
    expired: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """Members that failed verification, with the reason (nothing of them was stored)."""
    not_stored: dict[str, str] = field(default_factory=dict)
    """Verified, but the cache could not store them (a full disk)."""
    missing: list[str] = field(default_factory=list)
    """Keys the manifest names that the pack does not carry whole (it was cut short: the
    entry the cut ended is here too)."""
    purged: list[str] = field(default_factory=list)
    """Carried and verified, but purged here (or by the pack's own tombstones) up to a
    time after the take was made: not stored, and never will be by an import."""
    evicted: list[str] = field(default_factory=list)
    """Imported, then evicted by this cache's own caps before the import ended (a small
    device keeping what its clients use: see docs/operating/edge.md)."""
    removed: list[str] = field(default_factory=list)
    """Takes this node held that the pack's tombstones removed."""
    pinned: int = 0
    bytes: int = 0
    truncated: str | None = None
    snapshot: str | None = None
    identity_recorded: bool = False
    sequence: int = 0
    tombstones: int = 0
    strays: int = 0
    """Members no line names (each is in ``refused`` under its member name)."""

    @property
    def complete(self) -> bool:
        """Every entry of the pack is now here (imported, skipped, kept), or is not to be
        (expired, purged)."""
        return not (self.refused or self.not_stored or self.missing or self.truncated)

    @property
    def accounted(self) -> int:
        """Manifest lines the report places: equal to ``entries`` (each line is in exactly
        one of imported, skipped, kept, expired, purged, refused, not_stored, missing)."""
        return (len(self.imported) + len(self.skipped) + len(self.kept) + len(self.expired)
                + len(self.purged) + len(self.refused) - self.strays + len(self.not_stored)
                + len(self.missing))

    def describe(self) -> dict[str, Any]:
        """A JSON summary: counts, and the reason for every refusal."""
        return {"digest": self.digest, "signed_by": self.signed_by, "entries": self.entries,
                "imported": len(self.imported), "skipped": len(self.skipped),
                "kept": len(self.kept), "expired": len(self.expired),
                "refused": dict(self.refused), "not_stored": dict(self.not_stored),
                "missing": list(self.missing), "purged": list(self.purged),
                "evicted": len(self.evicted), "removed": list(self.removed),
                "pinned": self.pinned, "bytes": self.bytes, "strays": self.strays,
                "accounted": self.accounted, "sequence": self.sequence,
                "tombstones": self.tombstones, "truncated": self.truncated,
                "complete": self.complete}


def read_header(reader: PackReader, trusted: list[PublicKey], expect: str | None = None
                ) -> tuple[Manifest, bytearray, str]:
    """The verified manifest, its bytes and the id of the key that signed it (with
    ``expect``, the manifest must be the one of that digest: ``pack pull`` asked for it)."""
    try:
        manifest_bytes = _member(reader, MANIFEST, MAX_MANIFEST_BYTES)
        signature = _member(reader, SIGNATURE, MAX_SIGNATURE_BYTES)
    except BadPack as exc:
        raise BadPack(f"not a voxcache pack: {exc} (or the file was cut short before its "
                      "manifest); nothing was imported") from None
    if expect is not None and digest(manifest_bytes) != expect:
        raise UntrustedPack(f"the file holds pack {digest(manifest_bytes)[:12]}, not pack "
                            f"{expect[:12]} that was asked for (the center, or something on "
                            "the way, sent another pack); nothing was imported")
    signer = verify(signature, manifest_bytes, trusted)  # before a byte of it is believed
    return parse(manifest_bytes), manifest_bytes, signer.id


def import_pack(cache: Cache, stream: BinaryIO, trusted: list[PublicKey], *,
                pin: bool = False, progress: Progress | None = None,
                now: float | None = None, expect: str | None = None) -> Imported:
    """Verify and import a pack read from ``stream``; see the module docstring."""
    reader = PackReader(stream)
    manifest, manifest_bytes, signer = read_header(reader, trusted, expect)
    report = Imported(digest(manifest_bytes), signer, len(manifest.lines),
                      snapshot=manifest.snapshot, sequence=manifest.order,
                      tombstones=len(manifest.purged))
    try:
        admit(cache.index, signer, manifest.order, report.digest)
    except sqlite3.Error as exc:
        raise Overloaded(f"this cache's index cannot record the pack's sequence now ({exc}); "
                         "nothing was imported — try again") from None
    report.identity_recorded = _record_identity(cache, manifest)
    _apply_tombstones(cache, manifest.purged, report)
    _entries(cache, reader, manifest, pin, report, progress, now)
    kinds = {line.key: line.kind for line in manifest.lines}
    report.evicted = [key for key in report.imported
                      if not cache.folder.contains(key, kinds[key])]
    return report


def _entries(cache: Cache, reader: PackReader, manifest: Manifest, pin: bool,
             report: Imported, progress: Progress | None, now: float | None) -> None:
    """Read the members after the manifest one by one and place every line in the report.

    A line counts as seen once its member's data arrived whole (or was refused by its
    size), so the entry a cut ends is reported missing; a member whose data arrived whole
    is imported even when the cut falls in the padding after it."""
    expected = {line.member: line for line in manifest.lines}
    seen: set[str] = set()
    try:
        while (member := reader.next_member()) is not None:
            name, size = member
            line = expected.get(name)
            if line is None or name in seen:
                if report.strays == MAX_STRAYS:
                    raise BadPack(f"more than {MAX_STRAYS} members the manifest does not "
                                  "name; this is not a pack this tool wrote, reading stops")
                report.strays += 1
                report.refused[name] = ("the manifest names no such entry" if line is None
                                        else "a second copy of an entry")
                reader.skip(size)
                continue
            if size != line.size:
                seen.add(name)
                report.refused[line.key] = f"{size} bytes, but the manifest says {line.size}"
                reader.skip(size)
            else:
                blob = bytes(reader.read_data(size))
                seen.add(name)
                _one(cache, line, blob, pin, report, time.time() if now is None else now)
                del blob
                reader.skip_padding(size)
            if progress is not None:
                progress(len(seen), len(manifest.lines), reader.offset, manifest.total_bytes)
    except BadPack as exc:
        report.truncated = str(exc)
    report.missing = [line.key for line in manifest.lines if line.member not in seen]


def _apply_tombstones(cache: Cache, tombstones: tuple[purged.Tombstone, ...],
                      report: Imported) -> None:
    """The publisher purged these keys: remove the takes they cover here, and remember
    every one of them (as the pack says: a newer take held here stays, and may stay)."""
    if not tombstones:
        return
    keep = []
    for tombstone in tombstones:
        held = _stored(cache, tombstone.key, tombstone.kind)
        if held is not None and tombstone.covers(held.header.created):
            cache.delete(tombstone.key, tombstone.kind, until=tombstone.until)
            report.removed.append(tombstone.key)
        else:
            keep.append((tombstone.key, tombstone.kind, tombstone.until))
    try:
        purged.record(cache.index, keep, covering=False)
    except sqlite3.Error as exc:
        raise Overloaded(f"this cache's index cannot record the pack's purged keys now "
                         f"({exc}); import the pack again") from None


def _one(cache: Cache, line: Line, blob: bytes, pin: bool, report: Imported,
         now: float) -> None:
    """Check one entry against its line and store it (or say why not)."""
    reason = _refusal(line, blob)
    if reason is not None:
        report.refused[line.key] = reason
        return
    entry = decode(blob, line.key)
    if entry.header.expired(now):
        report.expired.append(line.key)
        return
    try:
        tombstone = purged.lookup(cache.index, line.key)
    except sqlite3.Error as exc:
        report.refused[line.key] = (f"this node's purges cannot be read now ({exc}); "
                                    "import the pack again")
        return
    if tombstone is not None and tombstone.covers(entry.header.created):
        report.purged.append(line.key)
        return
    wanted_pin = pin or line.pinned
    held = _stored(cache, line.key, line.kind)
    if held is not None and not held.header.expired(now):
        same_take = bytes(held.payload) == bytes(entry.payload)  # envelopes may differ
        (report.skipped if same_take else report.kept).append(line.key)
        if wanted_pin and cache.pin(line.key):
            report.pinned += 1
        return
    if not cache.put(entry, tenant=line.tenant, pinned=wanted_pin):
        report.not_stored[line.key] = "the cache could not store it (is the disk full?)"
        return
    _never_asked(cache, line.key, min(entry.header.created, now))
    report.imported.append(line.key)
    report.bytes += len(blob)
    report.pinned += int(wanted_pin)


def _never_asked(cache: Cache, key: str, created: float) -> None:
    """An imported take has not been asked for on this node: it was last used when it was
    made, and, like any take no one here has asked for, it enters the eviction order on
    probation (``tiers.eviction``). On a small device at its caps, a pack then fills what
    room there is and never pushes out the takes its clients are using (pin what must
    stay: ``--pin``). Best effort: the index is an accelerator."""
    with contextlib.suppress(sqlite3.Error), \
            cache.index.transaction(REQUEST_WAIT) as db:
        db.execute("UPDATE entries SET last_access = ?1 "
                   "WHERE key = ?2 AND hits = 0 AND last_access > ?1", (created, key))


def _refusal(line: Line, blob: bytes) -> str | None:
    """Why ``blob`` is not the entry ``line`` names, or None when it is."""
    if blake3.blake3(blob).hexdigest() != line.blake3:
        return "its BLAKE3 differs from the manifest's (altered or damaged)"
    try:
        entry = decode(blob, line.key)
    except CorruptEntry as exc:
        return f"its envelope does not verify under its key: {exc}"
    if entry.header.kind != line.kind:
        return f"it holds kind {entry.header.kind!r}, the manifest says {line.kind!r}"
    tenant = str(entry.header.meta.get("tenant") or "default")
    if tenant != line.tenant:
        return f"it belongs to tenant {tenant!r}, the manifest says {line.tenant!r}"
    return None


def _stored(cache: Cache, key: str, kind: str) -> Entry | None:
    """The verified entry already stored under ``key`` here, if any (read directly: an
    import must not count hits)."""
    try:
        blob = cache.folder.read_stored(key, kind)  # a file, or inline when small
        return None if blob is None else decode(blob, key)
    except (OSError, NotAnEntryFile, CorruptEntry):
        return None


def _member(reader: PackReader, name: str, limit: int) -> bytearray:
    member = reader.next_member()
    if member is None or member[0] != name:
        found = "the end of the file" if member is None else repr(member[0])
        raise BadPack(f"expected {name!r}, found {found}")
    if member[1] > limit:
        raise BadPack(f"{name} is {member[1]} bytes, over the {limit} limit")
    return reader.read(member[1])  # the one buffer the member was read into: never copied


def _record_identity(cache: Cache, manifest: Manifest) -> bool:
    """Record the pack's engine identity when this folder has none, or an older one: a
    node provisioned from packs alone can then start as an edge while offline."""
    if manifest.engine is None:
        return False
    try:
        identity.check(manifest.engine)
    except identity.BadIdentity as exc:
        log.warning("pack %s carries an unusable engine identity (%s); not recorded",
                    manifest.snapshot or "", exc)
        return False
    current = identity.read_record(cache.root)
    if current is not None and float(current.get("as_of", 0)) >= manifest.created:
        return False
    try:
        return identity.write_record(cache.root, manifest.engine, "pack",
                                     as_of=manifest.created)
    except OSError as exc:
        log.warning("could not record the pack's engine identity: %s", exc)
        return False
