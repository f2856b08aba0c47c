"""The manifest of a pack: one line per entry, the exact bytes that are signed.

Each entry is named by key, kind, size and BLAKE3 (collision resistant, so the signature
pins every byte; XXH3 would let a forger match it), with tenant, pin and index fields;
plus the engine identity, the base digest of a delta, the ``sequence`` and the publisher's
tombstones (``purged``). Parsing trusts nothing: every field type- and range-checked, a
key at most once. docs/operating/edge.md, "The pack format".
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import blake3

from ..errors import InvalidParameter
from ..tiers.entry_files import MAX_ENTRY_BYTES
from ..tiers.layout import suffix_of
from ..tiers.purged import Tombstone

FORMAT = "voxcache-pack"
NODE_FORMAT = "voxcache-node-manifest"
VERSION = 1
MAX_MANIFEST_BYTES = 256 * 2**20
"""A million entries take ~300 MB of manifest; far past any pack this tool is for."""
KEY = re.compile(r"[0-9a-f]{64}")
KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
TENANT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DIGEST = re.compile(r"[0-9a-f]{64}")


class BadManifest(InvalidParameter):
    """A manifest that does not parse or breaks a rule (signed or not, it is refused)."""


@dataclass(frozen=True, slots=True)
class Line:
    """One entry of a pack as the manifest names it."""

    key: str
    kind: str
    size: int
    blake3: str
    tenant: str = "default"
    pinned: bool = False
    created: float = 0.0
    expires: float | None = None
    engine: str = ""
    model: str = ""
    voice: str = ""
    text: str = ""

    @property
    def member(self) -> str:
        """The entry's name inside the pack: its path in a cache folder."""
        return f"objects/{self.key[:2]}/{self.key[2:4]}/{self.key}{suffix_of(self.kind)}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """A pack's manifest (or, without checksums, a node's: see ``node_manifest``)."""

    lines: tuple[Line, ...]
    created: float = field(default_factory=time.time)
    selection: Mapping[str, Any] = field(default_factory=dict)
    engine: Mapping[str, Any] | None = None
    base: Mapping[str, Any] | None = None
    """For a delta: ``{"digest": …, "entries": n}`` of the manifest it lacks nothing of."""
    snapshot: str | None = None
    """Published packs: the digest of the whole selection's manifest this pack completes
    (an edge sends it back as ``base`` next time)."""
    sequence: int | None = None
    """The publisher's number for this pack (``packs.sequence``); None in packs made before
    sequences existed (``created`` stands in)."""
    purged: tuple[Tombstone, ...] = ()
    """The publisher's tombstones: keys purged there, each with the creation time up to
    which its takes are gone."""

    def to_bytes(self) -> bytes:
        """Canonical JSON: what is signed, hashed and written as ``manifest.json``."""
        doc = {
            "format": FORMAT, "version": VERSION, "created": self.created,
            "selection": dict(self.selection), "engine": self.engine,
            "base": None if self.base is None else dict(self.base),
            "snapshot": self.snapshot, "sequence": self.sequence,
            "purged": [{"key": t.key, "kind": t.kind, "until": t.until} for t in self.purged],
            "totals": {"entries": len(self.lines), "bytes": sum(x.size for x in self.lines)},
            "entries": [asdict(line) for line in self.lines],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode()

    @property
    def total_bytes(self) -> int:
        """Bytes of entries the pack carries."""
        return sum(line.size for line in self.lines)

    @property
    def order(self) -> int:
        """Where this pack stands among its publisher's: the sequence, or for an older pack
        its creation time in milliseconds (the scale sequences are issued on)."""
        return self.sequence if self.sequence is not None else int(self.created * 1000)


def digest(data: bytes | bytearray) -> str:
    """The name of a manifest (or any document): BLAKE3 hex of its bytes."""
    return blake3.blake3(data).hexdigest()


def parse(data: bytes | bytearray) -> Manifest:
    """Parse and check a pack manifest; raise ``BadManifest`` naming the first problem."""
    doc = _load(data)
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise BadManifest(f"not a {FORMAT} manifest of version {VERSION} (format "
                          f"{doc.get('format')!r}, version {doc.get('version')!r})")
    lines = tuple(_line(i, raw) for i, raw in enumerate(_list(doc, "entries")))
    _unique(lines)
    base = doc.get("base")
    if base is not None and not (isinstance(base, dict) and _is_digest(base.get("digest"))):
        raise BadManifest("manifest 'base' must be null or {\"digest\": <64 hex>, ...}")
    snapshot = doc.get("snapshot")
    if snapshot is not None and not _is_digest(snapshot):
        raise BadManifest("manifest 'snapshot' must be null or 64 hex digits")
    engine, selection = doc.get("engine"), doc.get("selection", {})
    if engine is not None and not isinstance(engine, dict):
        raise BadManifest("manifest 'engine' must be an object or null")
    if not isinstance(selection, dict):
        raise BadManifest("manifest 'selection' must be an object")
    sequence = doc.get("sequence")
    if sequence is not None and (isinstance(sequence, bool) or not isinstance(sequence, int)
                                 or not 0 <= sequence < 2**63):
        raise BadManifest("manifest 'sequence' must be null or an integer from 0 to 2**63-1")
    created = _number(doc.get("created"), "created")
    if not 0 <= created < 2**53 / 1000:
        raise BadManifest("manifest 'created' must be a time in seconds since 1970")
    return Manifest(lines, created, selection, engine, base, snapshot, sequence,
                    _tombstones(doc.get("purged", [])))


def keys_of(data: bytes) -> set[str]:
    """The keys a node manifest (``pack manifest``) or a pack manifest lists: what a node
    holds, for a delta export. Only keys are read; anything else is ignored."""
    doc = _load(data)
    if doc.get("format") not in (FORMAT, NODE_FORMAT):
        raise BadManifest(f"expected a node manifest (`voxcache pack manifest`) or a pack "
                          f"manifest, got format {doc.get('format')!r}")
    keys = set()
    for i, raw in enumerate(_list(doc, "entries")):
        key = raw.get("key") if isinstance(raw, dict) else None
        if not isinstance(key, str) or not KEY.fullmatch(key):
            raise BadManifest(f"manifest entry {i}: 'key' must be 64 hex digits")
        keys.add(key)
    return keys


def node_manifest(rows: Iterable[Mapping[str, Any]], now: float | None = None) -> bytes:
    """What a node holds (from its index: no file is read), as ``pack manifest`` prints it."""
    entries = [{"key": r["key"], "kind": r["kind"], "size": r["size"], "tenant": r["tenant"]}
               for r in rows]
    doc = {"format": NODE_FORMAT, "version": VERSION,
           "created": time.time() if now is None else now, "entries": entries}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _load(data: bytes | bytearray) -> dict[str, Any]:
    if len(data) > MAX_MANIFEST_BYTES:
        raise BadManifest(f"manifest of {len(data)} bytes is over the {MAX_MANIFEST_BYTES} "
                          "limit")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadManifest(f"manifest is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadManifest("manifest must be a JSON object")
    return doc


def _list(doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    if not isinstance(value, list):
        raise BadManifest(f"manifest '{name}' must be a list")
    return value


def _line(index: int, raw: Any) -> Line:
    """One entry line, every field checked (the first bad one is named)."""
    where = f"manifest entry {index}"
    if not isinstance(raw, dict):
        raise BadManifest(f"{where} must be an object")
    unknown = set(raw) - set(Line.__dataclass_fields__)
    if unknown:
        raise BadManifest(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
    checks = {"key": KEY, "kind": KIND, "blake3": DIGEST, "tenant": TENANT}
    for name, pattern in checks.items():
        value = raw.get(name, "default" if name == "tenant" else None)
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise BadManifest(f"{where}: {name!r} is missing or malformed")
    size = raw.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= MAX_ENTRY_BYTES:
        raise BadManifest(f"{where}: 'size' must be a byte count from 1 to {MAX_ENTRY_BYTES}")
    if not isinstance(raw.get("pinned", False), bool):
        raise BadManifest(f"{where}: 'pinned' must be true or false")
    expires = raw.get("expires")
    for name in ("engine", "model", "voice", "text"):
        if not isinstance(raw.get(name, ""), str):
            raise BadManifest(f"{where}: {name!r} must be a string")
    return Line(
        key=raw["key"], kind=raw["kind"], size=size, blake3=raw["blake3"],
        tenant=raw.get("tenant", "default"), pinned=raw.get("pinned", False),
        created=_number(raw.get("created", 0.0), f"{where} 'created'"),
        expires=None if expires is None else _number(expires, f"{where} 'expires'"),
        engine=raw.get("engine", ""), model=raw.get("model", ""), voice=raw.get("voice", ""),
        text=raw.get("text", ""))


def _tombstones(raw: Any) -> tuple[Tombstone, ...]:
    """The ``purged`` list: each {"key", "kind", "until"} checked, no key twice."""
    if not isinstance(raw, list):
        raise BadManifest("manifest 'purged' must be a list")
    found: dict[str, Tombstone] = {}
    for i, item in enumerate(raw):
        where = f"manifest purged[{i}]"
        if not isinstance(item, dict) or set(item) != {"key", "kind", "until"}:
            raise BadManifest(f"{where} must be {{\"key\", \"kind\", \"until\"}}")
        key, kind = item["key"], item["kind"]
        if not isinstance(key, str) or not KEY.fullmatch(key):
            raise BadManifest(f"{where}: 'key' must be 64 hex digits")
        if not isinstance(kind, str) or not KIND.fullmatch(kind):
            raise BadManifest(f"{where}: 'kind' is malformed")
        if key in found:
            raise BadManifest(f"key {key} appears twice in the manifest's purged list")
        found[key] = Tombstone(key, kind, _number(item["until"], f"{where} 'until'"))
    return tuple(found.values())


def _unique(lines: tuple[Line, ...]) -> None:
    seen: set[str] = set()
    for line in lines:
        if line.key in seen:
            raise BadManifest(f"key {line.key} appears twice in the manifest")
        seen.add(line.key)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadManifest(f"manifest {name} must be a finite number")
    return float(value)


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and DIGEST.fullmatch(value) is not None
