"""Tensor entries: a standard safetensors file with voxcache's envelope in ``__metadata__``.

Embeddings, prompt features, token takes and session state are arrays, so they
are stored as the file format the model world already reads: any safetensors
loader (``safetensors.numpy.load_file``, ``safe_open``, the Rust crate) opens a
cache file as it is, and nothing in it can execute code when loaded — no pickle
on either side. torch tensors are converted to numpy at the boundary
(``as_numpy``), so this module never imports torch.

``__metadata__`` holds exactly one key, ``voxcache``, whose value is the canonical
JSON ``{"checksum": …, "header": …}``: the same header audio entries carry (kind,
key, created/expiry, tenant and the inputs' description in ``meta``) and an
XXH3-128 over that header, the tensors' descriptors (names, dtypes, shapes,
offsets) and the data section. One key, because the Rust writer keeps metadata
in a hash map whose order changes from process to process.

``decode_tensor_entry`` verifies every byte: the checksum covers the header, the
descriptors and every data byte; every other byte (the length prefix, the JSON
punctuation, spacing and padding) is checked by serialising the parsed tensors
again with the same library and comparing the whole file. A flip anywhere is a
``CorruptEntry`` — which the tiers turn into a miss plus a quarantine.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
import xxhash

from .envelope import CorruptEntry, Entry, EntryHeader

CONTENT_TYPE = "application/x-safetensors"
TENSOR_KINDS = frozenset({"embedding", "prompt", "tokens", "session"})
"""The artifact kinds stored as tensors (``tiers.layout`` names their files ``.safetensors``)."""
METADATA_KEY = "voxcache"
_LENGTH = struct.Struct("<Q")


def as_numpy(value: Any) -> np.ndarray:
    """A numpy array from a numpy array or a torch tensor (detached, moved to the CPU).

    The one place a foreign tensor type crosses into voxcache; torch is never
    imported here, a tensor is recognised by its methods.
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()  # numpy has no bfloat16; float32 holds it exactly
        return np.asarray(value.numpy())
    return np.asarray(value)


def tensor_entry(
    key: str, kind: str, tensors: Mapping[str, Any], *, ttl: float | None = None,
    meta: Mapping[str, Any] | None = None, now: float | None = None,
) -> Entry:
    """Build the stored form of a tensor artifact: a safetensors file carrying the envelope."""
    if kind not in TENSOR_KINDS:
        raise ValueError(f"{kind!r} is not a tensor kind ({', '.join(sorted(TENSOR_KINDS))})")
    arrays = {name: np.ascontiguousarray(as_numpy(value)) for name, value in tensors.items()}
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise TypeError(f"tensor {name!r} holds Python objects; store numbers only")
    created = time.time() if now is None else now
    draft = _serialize(arrays, "")
    descriptors, data_at = _descriptors(draft)
    header = EntryHeader(
        kind=kind, key=key, created=created, expires=None if ttl is None else created + ttl,
        content_type=CONTENT_TYPE, length=len(draft) - data_at, meta=dict(meta or {}),
    )
    header_json = _canonical(asdict(header))
    checksum = _checksum(header_json, descriptors, memoryview(draft)[data_at:])
    blob = _serialize(arrays, _envelope_text(header_json, checksum))
    return Entry(header, blob, _data_offset(blob))


def looks_like_safetensors(blob: bytes) -> bool:
    """True when ``blob`` has the safetensors layout (a length, then a JSON object)."""
    return len(blob) >= _LENGTH.size + 2 and blob[_LENGTH.size:_LENGTH.size + 1] == b"{"


def decode_tensor_entry(blob: bytes, expected_key: str) -> Entry:
    """Parse and verify a stored tensor entry; raise ``CorruptEntry`` on any mismatch."""
    data_at = _data_offset(blob)
    try:
        parsed = json.loads(blob[_LENGTH.size:data_at])
    except (UnicodeDecodeError, ValueError):
        raise CorruptEntry("safetensors header is not JSON") from None
    if not isinstance(parsed, dict):
        raise CorruptEntry("safetensors header is not an object")
    header, checksum_hex = _envelope_of(parsed.pop("__metadata__", None))
    if header.kind not in TENSOR_KINDS:
        raise CorruptEntry(f"a safetensors file holding kind {header.kind!r}")
    data = memoryview(blob)[data_at:]
    if header.length != len(data):
        raise CorruptEntry("file length does not match the envelope (truncated?)")
    try:
        header_json = _canonical(asdict(header))
        descriptors = _canonical(parsed)
    except (TypeError, ValueError):  # NaN, Infinity or a non-JSON value planted in the header
        raise CorruptEntry("tensor header holds values voxcache never writes") from None
    if _checksum(header_json, descriptors, data).hex() != checksum_hex:
        raise CorruptEntry("checksum mismatch")
    if _serialize(load_tensors(blob), _envelope_text(header_json, checksum_hex)) != blob:
        raise CorruptEntry("file layout does not match the envelope")
    if header.key != expected_key:
        raise CorruptEntry(f"stored under {header.key}, found at {expected_key}")
    return Entry(header, blob, data_at)


def load_tensors(blob: bytes | Entry) -> dict[str, np.ndarray]:
    """The arrays of a safetensors file (an entry's whole stored file)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    raw = blob.blob if isinstance(blob, Entry) else blob
    try:
        return load(bytes(raw))
    except (SafetensorError, ValueError, TypeError) as exc:
        raise CorruptEntry(f"not a readable safetensors file: {exc}") from None


def _serialize(arrays: Mapping[str, np.ndarray], envelope: str) -> bytes:
    from safetensors.numpy import save

    return save(dict(arrays), metadata={METADATA_KEY: envelope})


def _data_offset(blob: bytes) -> int:
    """Where the data section starts; refuses a length that points past the file."""
    if len(blob) < _LENGTH.size:
        raise CorruptEntry("safetensors file truncated")
    (length,) = _LENGTH.unpack_from(blob, 0)
    if length > len(blob) - _LENGTH.size:
        raise CorruptEntry("safetensors header length points past the file (truncated?)")
    return _LENGTH.size + length


def _descriptors(blob: bytes) -> tuple[bytes, int]:
    """The canonical JSON of a serialised file's tensor descriptors, and its data offset."""
    data_at = _data_offset(blob)
    parsed = json.loads(blob[_LENGTH.size:data_at])
    parsed.pop("__metadata__", None)
    return _canonical(parsed), data_at


def _envelope_of(metadata: Any) -> tuple[EntryHeader, str]:
    """The header and checksum from ``__metadata__`` (not yet verified)."""
    if not isinstance(metadata, dict) or set(metadata) != {METADATA_KEY}:
        raise CorruptEntry("not a voxcache tensor entry (no envelope in __metadata__)")
    try:
        envelope = json.loads(metadata[METADATA_KEY])
        header = EntryHeader(**envelope["header"])
        checksum = envelope["checksum"]
    except (ValueError, TypeError, KeyError):
        raise CorruptEntry("tensor envelope unreadable") from None
    if not isinstance(checksum, str) or not isinstance(header.length, int):
        raise CorruptEntry("tensor envelope fields have the wrong types")
    if not isinstance(header.meta, dict) or not isinstance(header.key, str):
        raise CorruptEntry("tensor envelope fields have the wrong types")
    return header, checksum


def _envelope_text(header_json: bytes, checksum: bytes | str) -> str:
    digest = checksum if isinstance(checksum, str) else checksum.hex()
    return _canonical({"checksum": digest, "header": json.loads(header_json)}).decode()


def _checksum(header_json: bytes, descriptors: bytes, data: memoryview) -> bytes:
    hasher = xxhash.xxh3_128(header_json)
    hasher.update(b"\0")
    hasher.update(descriptors)
    hasher.update(b"\0")
    hasher.update(data)
    return hasher.digest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
