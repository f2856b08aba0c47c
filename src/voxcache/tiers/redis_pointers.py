"""Redis pointers: the tiny verified record Redis holds for an entry stored in the object
tier (S3), naming the object, its size and its XXH3-128."""

from __future__ import annotations

import json

from ..entry import CorruptEntry, Entry, blob_entry, decode
from .remote import ObjectRef, blob_digest

POINTER_KIND = "pointer"
POINTER_TYPE = "application/vnd.voxcache.pointer+json"

def pointer_blob(entry: Entry, ref: ObjectRef) -> bytes:
    """The verified pointer record for ``entry`` stored as ``ref`` (expiring with it)."""
    header = entry.header
    record = {"kind": header.kind, "object": ref.name, "size": ref.size, "xxh3": ref.digest}
    payload = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    ttl = None if header.expires is None else header.expires - header.created
    return blob_entry(header.key, POINTER_KIND, payload, POINTER_TYPE, ttl=ttl,
                      now=header.created).blob


def points_to(value: bytes, entry: Entry) -> bool:
    """Whether a pointer value we built names ``entry``'s own bytes (not an earlier
    writer's object)."""
    record = json.loads(bytes(decode(value, entry.header.key).payload))
    return bool(record.get("xxh3") == blob_digest(entry.blob))


def pointer_ref(pointer: Entry, kind: str, expected_object: str) -> ObjectRef:
    """The object a verified pointer names; ``CorruptEntry`` unless it names exactly the
    object where ``kind`` belongs (a pointer cannot send a read anywhere else)."""
    try:
        record = json.loads(bytes(pointer.payload))
        ref = ObjectRef(record["object"], record["size"], record["xxh3"])
        pointed_kind = record["kind"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptEntry(f"pointer unreadable: {exc}") from None
    if pointed_kind != kind or ref.name != expected_object:
        raise CorruptEntry(f"pointer names {ref.name!r} ({pointed_kind!r}), not "
                           f"{expected_object!r}")
    if not isinstance(ref.size, int) or not isinstance(ref.digest, str):
        raise CorruptEntry("pointer size or digest malformed")
    return ref


