"""Tensor entries: a standard safetensors file with voxcache's envelope in ``__metadata__``.

Any safetensors loader opens a cache file as it is, and nothing in it can execute code
(no pickle on either side; torch tensors become numpy at the boundary, ``as_numpy``).
``__metadata__`` holds one key, ``voxcache``: the entry header and an XXH3-128 over it, the
tensors' descriptors and the data. ``decode_tensor_entry`` verifies every byte without
re-serialising; a flip anywhere is ``CorruptEntry``. docs/internals/stages.md, "Storage".
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping
from functools import lru_cache
from math import prod
from typing import Annotated, Any

import msgspec
import numpy as np
import xxhash

from .envelope import CorruptEntry, Entry, EntryHeader

CONTENT_TYPE = "application/x-safetensors"
TENSOR_KINDS = frozenset({"embedding", "prompt", "tokens", "session", "voice"})
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


def tensor_voice(value: Any, shape: tuple[int, ...], dtype: str) -> tuple[np.ndarray, str]:
    """A tensor voice in its canonical form — ``dtype`` (a float voice may be given in any
    float type, an integer one in any integer type), little-endian, C order — and its
    fingerprint: BLAKE3 over dtype, shape and bytes, so the same values are one voice and
    one value changed is another. ``ValueError`` says what is wrong with it."""
    import blake3

    array = as_numpy(value)
    want = np.dtype(dtype)
    if array.dtype.kind not in ("f", "i", "u") or (array.dtype.kind == "f") != (
            want.kind == "f"):
        raise ValueError(f"a tensor voice must hold {want.name} values, not {array.dtype}")
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"a tensor voice must have shape {list(shape)}, not "
                         f"{list(array.shape)}")
    canonical = np.ascontiguousarray(array, dtype=want.newbyteorder("<"))
    if want.kind == "f" and not np.isfinite(canonical).all():
        raise ValueError("a tensor voice must hold finite numbers (no NaN or infinity)")
    identity = f"{want.name}|{','.join(map(str, shape))}|".encode() + canonical.tobytes()
    return canonical, blake3.blake3(identity).hexdigest()


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
    header_json = _canonical(header.fields())
    checksum = _checksum(header_json, descriptors, memoryview(draft)[data_at:])
    blob = _serialize(arrays, _envelope_text(header_json, checksum))
    return Entry(header, blob, _data_offset(blob))


def decode_tensor_entry(blob: bytes, expected_key: str) -> Entry:
    """Parse and verify a stored tensor entry; raise ``CorruptEntry`` on any mismatch.

    Every byte is covered without loading the tensors or serialising them again (that
    round trip was ~15 µs of a ~23 µs hit). The checksum covers the header JSON, the
    descriptors and the data. Every other byte is compared with what the writer puts
    there for those values (``_head``). The safetensors header (everything before the data)
    is checked once per distinct byte string and remembered (``_HEADS``): a later read of
    the same entry compares its header byte for byte with the one checked, then hashes the
    header JSON, descriptors and data again and compares the checksum, as every read does.
    """
    total = len(blob)
    if total < _TEXT_AT or not blob.startswith(_LEAD, _LENGTH.size):
        raise CorruptEntry("not a voxcache tensor entry (no envelope first in __metadata__)")
    data_at = _LENGTH.size + _LENGTH.unpack_from(blob)[0]
    if data_at > total or (data_at - _LENGTH.size) % _ALIGN:
        raise CorruptEntry("safetensors header length is not one the library writes "
                           "(truncated?)")
    head = blob[:data_at]
    header, header_json, descriptors, checksum = (
        _head if data_at <= _HEAD_MEMO_MAX else _head.__wrapped__)(head)
    if header.length != total - data_at:
        raise CorruptEntry("file length does not match the envelope (truncated?)")
    digest = xxhash.xxh3_128(header_json)
    digest.update(descriptors)
    digest.update(memoryview(blob)[data_at:])
    if digest.digest() != checksum:
        raise CorruptEntry("checksum mismatch")
    if header.key != expected_key:
        raise CorruptEntry(f"stored under {header.key}, found at {expected_key}")
    return _entry(header, blob, data_at)


_HEADS = 1024
"""Safetensors headers remembered as checked (``_head``): at most ``_HEADS`` ×
``_HEAD_MEMO_MAX`` bytes (~4 MB), enough for the hot speaker embeddings of a service."""
_HEAD_MEMO_MAX = 4096


@lru_cache(maxsize=_HEADS)
def _head(head: bytes) -> tuple[EntryHeader, bytes, bytes, bytes]:
    """Check a safetensors header (the file's bytes before its data) byte by byte; return
    the entry header, what the checksum covers of it (the header JSON, the descriptors
    between separators) and the checksum. Raises ``CorruptEntry``; the data length is
    ``header.length``, which the layout is held to.

    The envelope text and the layout are compared with what the writer puts there for
    those values: the envelope text around the header JSON (``_envelope_text``), and the
    safetensors header the library writes around it — the length, the JSON's order,
    spacing and escapes, the padding (``_LEAD``, ``_descriptors_of``). A pure function of
    the bytes, so it is memoised (an exception is not); the caller hashes the data."""
    # Where the envelope's JSON string ends: the one '}"}' a header the library writes
    # holds (the text ends with '}'; every '"' inside a string is escaped; a descriptor's
    # strings are followed by ':' or ','). Searched from the end, where it is near; a
    # wrong guess in a damaged file fails the comparisons below.
    text_end = head.rfind(b'}"}', _TEXT_AT) + 2  # just past the closing quote
    escaped = head[_TEXT_AT - 1:text_end]  # the JSON string, quotes included
    try:
        text = _TEXT.decode(escaped)
    except msgspec.DecodeError:
        raise CorruptEntry("tensor envelope is not a JSON string") from None
    layout = _descriptors_of(head[text_end:])
    if layout is None or _ENCODE(text) != escaped:
        raise CorruptEntry("file layout does not match the envelope")
    if not (text.startswith(_OPENING) and text.startswith(_MIDDLE, _CHECKSUM_END)
            and text.endswith("}")):
        raise CorruptEntry("tensor envelope is not one voxcache writes")
    header_json = text[_HEADER_AT:-1]
    try:
        header = _HEADER.decode(header_json)
    except msgspec.DecodeError:
        raise CorruptEntry("tensor envelope header unreadable") from None
    if header.kind not in TENSOR_KINDS:
        raise CorruptEntry(f"a safetensors file holding kind {header.kind!r}")
    if header.length != layout[1]:
        raise CorruptEntry("file length does not match the envelope (truncated?)")
    try:
        checksum = bytes.fromhex(text[_CHECKSUM_AT:_CHECKSUM_END])
    except ValueError:
        raise CorruptEntry("checksum mismatch") from None
    if checksum.hex() != text[_CHECKSUM_AT:_CHECKSUM_END]:  # upper case, spaces: not ours
        raise CorruptEntry("checksum mismatch")
    return header, header_json.encode(), layout[0], checksum


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


_Size = Annotated[int, msgspec.Meta(ge=0)]


class _Tensor(msgspec.Struct, forbid_unknown_fields=True):
    """One tensor's descriptor, its fields in the order the safetensors library writes
    them: re-encoding a decoded one gives the library's bytes for its values."""

    dtype: str
    shape: list[_Size]
    data_offsets: tuple[_Size, _Size]


_DTYPES = {name: (rank, width) for rank, (name, width) in enumerate((
    ("BOOL", 1), ("U8", 1), ("I8", 1), ("I16", 2), ("U16", 2), ("F16", 2), ("I32", 4),
    ("U32", 4), ("F32", 4), ("C64", 8), ("F64", 8), ("I64", 8), ("U64", 8)))}
"""The dtypes numpy arrays are written as, in the order of the library's ``Dtype`` enum
(it lays tensors out by that order, descending, then by name), with bytes per element."""
_LEAD = b'{"__metadata__":{"%s":"' % METADATA_KEY.encode()
"""How the library's header starts when ``__metadata__`` holds just ``voxcache``."""
_TEXT_AT = _LENGTH.size + len(_LEAD)  # the envelope text's first (escaped) byte
_ALIGN = 8  # the library pads its header with spaces to a multiple of 8 bytes
_TEXT = msgspec.json.Decoder(str)
_TENSORS = msgspec.json.Decoder(dict[str, _Tensor])
_HEADER = msgspec.json.Decoder(EntryHeader)
_ENCODE = msgspec.json.Encoder().encode
_ENCODE_SORTED = msgspec.json.Encoder(order="sorted").encode
_OPENING, _MIDDLE = '{"checksum":"', '","header":'
"""The envelope text around the checksum's 32 hex digits: ``_envelope_text``'s output."""
_CHECKSUM_AT = len(_OPENING)
_CHECKSUM_END = _CHECKSUM_AT + 32
_HEADER_AT = _CHECKSUM_END + len(_MIDDLE)
_SEPARATOR = b"\0"
_NEW = object.__new__
_SET_HEADER = Entry.header.__set__  # type: ignore[attr-defined]
_SET_BLOB = Entry.blob.__set__  # type: ignore[attr-defined]
_SET_OFFSET = Entry.payload_offset.__set__  # type: ignore[attr-defined]


def _descriptors_of(rest: bytes) -> tuple[bytes, int] | None:
    """What follows the envelope in a safetensors header the library writes — the close
    of ``__metadata__``, the descriptors, the padding — as what the checksum covers of it
    (the descriptors' canonical JSON between the separators ``_checksum`` puts around
    them) and the data length; None when the library writes no header ending in these
    bytes.

    The library (``safetensors::tensor::prepare``, as of 0.8) lays tensors out by dtype,
    descending in its ``Dtype`` order, then by name, each at the next offset and exactly
    its size; writes compact JSON (serde_json: ``__metadata__`` first, each descriptor's
    fields in ``_Tensor``'s order, msgspec's string escapes) and pads it with fewer than 8
    spaces to a multiple of 8 bytes (the caller checks the multiple).
    ``tests/core/test_hit_path_verification.py`` holds this against the installed library."""
    body = rest.rstrip(b" ")
    if len(rest) - len(body) >= _ALIGN:
        return None
    tensors: dict[str, _Tensor] = {}
    if body != b"}}":  # no tensors: the header closes right after __metadata__
        if not body.startswith(b'},"'):
            return None
        try:
            tensors = _TENSORS.decode(b"{" + body[2:])
        except msgspec.DecodeError:
            return None
        if b"}," + _ENCODE(tensors)[1:] != body:
            return None
    end, last = 0, (-len(_DTYPES), "")  # before every (-rank, name)
    for name, tensor in tensors.items():
        known = _DTYPES.get(tensor.dtype)
        if known is None:
            return None
        start, stop = tensor.data_offsets
        place = (-known[0], name)  # str order is code point order: UTF-8's, as Rust's
        if start != end or stop - start != prod(tensor.shape) * known[1] or place <= last:
            return None
        last, end = place, stop
    return _SEPARATOR + _descriptors_json(tensors) + _SEPARATOR, end


def _descriptors_json(tensors: dict[str, _Tensor]) -> bytes:
    """``_canonical`` of the descriptors: msgspec writes the same bytes as
    ``json.dumps(sort_keys=True)`` (same escapes, same order) unless a name holds a
    character ``json.dumps`` escapes as ASCII (DEL, non-ASCII)."""
    text = _ENCODE_SORTED(tensors)
    if text.isascii() and b"\x7f" not in text:
        return text
    return _canonical({name: {"data_offsets": list(t.data_offsets), "dtype": t.dtype,
                              "shape": t.shape} for name, t in tensors.items()})


def _entry(header: EntryHeader, blob: bytes, payload_offset: int) -> Entry:
    """``Entry(header, blob, payload_offset)`` without the frozen dataclass's ``__init__``
    (as ``entry._entry``: a third of a microsecond of a few-microsecond hit)."""
    entry = _NEW(Entry)
    _SET_HEADER(entry, header)
    _SET_BLOB(entry, blob)
    _SET_OFFSET(entry, payload_offset)
    return entry


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
