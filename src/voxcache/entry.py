"""The stored-object envelope, verified on every read from storage.

Audio entries are WAV files with a private ``vxch`` chunk holding the envelope (players
skip it; a file server can hand the file out verbatim); other kinds put the envelope
before the payload (magic ``VXCB``). The envelope names the version, kind, key, times,
content type, audio metadata, payload length and an XXH3-128 checksum; ``decode`` checks
all of it, and any mismatch is ``CorruptEntry`` (a miss plus a quarantine, never audio).
"""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import msgspec
import xxhash

from .audio import SAMPLE_WIDTH, Audio
from .envelope import CorruptEntry, Entry, EntryHeader
from .tensors import decode_tensor_entry

__all__ = ["CorruptEntry", "Entry", "EntryHeader", "audio_entry", "blob_entry", "decode"]

FORMAT_VERSION = 1
ENVELOPE_MAGIC = b"VXC1"
BLOB_MAGIC = b"VXCB"
_PREFIX = struct.Struct("<4sHHI")  # magic, format version, reserved, header length
_CHECKSUM_LEN = 16
_FMT = struct.Struct("<HHIIHH")  # PCM tag, channels, rate, byte rate, block align, bits
_WAV_HEAD = struct.Struct("<4sI4s4sI" "HHIIHH" "4sI" "4sHHI")
"""Every byte of an audio entry before its header JSON: ``RIFF`` and its size, ``WAVE``,
the ``fmt `` chunk, the ``vxch`` chunk's name and size, the envelope prefix."""
_DATA = struct.Struct("<4sI")  # the ``data`` chunk's name and size
_HEADER_LEN = struct.Struct("<I")  # the last field of the envelope prefix
_BLOB_HEAD = _PREFIX.pack(BLOB_MAGIC, FORMAT_VERSION, 0, 0)[: _PREFIX.size - _HEADER_LEN.size]
"""A blob's first bytes before its header length (magic, version, reserved): a constant."""
_BLOB_JSON_AT = _PREFIX.size  # where a blob's header JSON starts
_PAD = (b"", b"\0")
_HEADER_DECODER = msgspec.json.Decoder(EntryHeader)
_NEW = object.__new__
_SET_HEADER = Entry.header.__set__  # type: ignore[attr-defined]
_SET_BLOB = Entry.blob.__set__  # type: ignore[attr-defined]
_SET_OFFSET = Entry.payload_offset.__set__  # type: ignore[attr-defined]


def audio_entry(
    key: str, audio: Audio, *, ttl: float | None = None, meta: dict[str, Any] | None = None,
    now: float | None = None,
) -> Entry:
    """Build the stored form of a take: a WAV file carrying the envelope."""
    created = time.time() if now is None else now
    header = EntryHeader(
        kind="audio", key=key, created=created,
        expires=None if ttl is None else created + ttl,
        content_type="audio/wav", length=len(audio.pcm),
        sample_rate=audio.sample_rate, channels=audio.channels, sample_format="s16le",
        duration=round(audio.duration, 6), meta=meta or {},
    )
    header_json, checksum = _seal(header, audio.pcm)
    prefix = _wav_prefix(header, header_json, checksum)
    return Entry(header, prefix + audio.pcm, len(prefix))


def blob_entry(
    key: str, kind: str, payload: bytes, content_type: str, *, ttl: float | None = None,
    meta: dict[str, Any] | None = None, now: float | None = None,
) -> Entry:
    """Build the stored form of a non-audio artifact (encoded audio, tokens, records)."""
    created = time.time() if now is None else now
    header = EntryHeader(
        kind=kind, key=key, created=created, expires=None if ttl is None else created + ttl,
        content_type=content_type, length=len(payload), meta=meta or {},
    )
    header_json, checksum = _seal(header, payload)
    prefix = _envelope(BLOB_MAGIC, header_json, checksum)
    return Entry(header, prefix + payload, len(prefix))


def decode(blob: bytes, expected_key: str) -> Entry:
    """Parse and verify a stored object; raise ``CorruptEntry`` on any mismatch.

    Every byte is covered: the header JSON and the payload by the checksum, and
    every other byte (RIFF sizes, the ``fmt `` chunk, the envelope prefix, the pad
    byte, chunk names and lengths) by rebuilding it from the verified header and
    comparing — so no byte of a stored file can change and still be served.

    This is on every disk hit, so it is written for speed without dropping a check:
    the header JSON is decoded straight into ``EntryHeader`` with its types checked
    (msgspec, in C), the bytes around it are rebuilt with precompiled structs and
    compared in place, and nothing is copied but the header's few hundred bytes.
    """
    magic = blob[:4]
    if magic == b"RIFF":
        return _decode_wav(blob, expected_key)
    if magic == BLOB_MAGIC:
        return _decode_blob(blob, expected_key)
    if blob[8:9] == b"{":  # a safetensors header (a length, then JSON): tensor kinds
        return decode_tensor_entry(blob, expected_key)
    raise CorruptEntry("not a voxcache object (bad magic)")


def _decode_wav(blob: bytes, expected_key: str) -> Entry:
    """An audio entry: ``_WAV_HEAD`` | header JSON | checksum | pad | ``data`` + length | PCM."""
    total = len(blob)
    if total < _WAV_HEAD.size:
        raise CorruptEntry("envelope truncated")
    header_len = _HEADER_LEN.unpack_from(blob, _WAV_HEAD.size - 4)[0]
    json_end = _WAV_HEAD.size + header_len
    envelope_len = _PREFIX.size + header_len + _CHECKSUM_LEN
    tail_at = json_end + _CHECKSUM_LEN
    prefix_len = tail_at + (envelope_len & 1) + _DATA.size
    if prefix_len > total:
        raise CorruptEntry("envelope truncated")
    view = memoryview(blob)
    header = _header_of(view[_WAV_HEAD.size:json_end])
    if header.kind != "audio":
        raise CorruptEntry(f"a WAV envelope holding kind {header.kind!r}")
    channels, rate = header.channels, header.sample_rate
    if not (0 < rate < 2**31 and 0 < channels < 2**15):
        raise CorruptEntry("envelope audio format is out of range")
    if total != prefix_len + header.length:
        raise CorruptEntry("file length does not match the envelope (truncated?)")
    block = channels * SAMPLE_WIDTH
    try:
        head = _WAV_HEAD.pack(b"RIFF", total - 8, b"WAVE", b"fmt ", _FMT.size,
                              1, channels, rate, rate * block, block, 16,
                              b"vxch", envelope_len, ENVELOPE_MAGIC, FORMAT_VERSION, 0,
                              header_len)
    except struct.error:  # a byte rate no WAV can hold: never one we wrote
        raise CorruptEntry("envelope audio format is out of range") from None
    tail = _PAD[envelope_len & 1] + _DATA.pack(b"data", header.length)
    if blob[: _WAV_HEAD.size] != head or blob[tail_at:prefix_len] != tail:
        raise CorruptEntry("file layout does not match the envelope")
    return _verified(blob, view, header, _WAV_HEAD.size, json_end, prefix_len, expected_key)


def _decode_blob(blob: bytes, expected_key: str) -> Entry:
    """Any other kind: ``_PREFIX`` | header JSON | checksum | payload."""
    total = len(blob)
    if total < _BLOB_JSON_AT:
        raise CorruptEntry("envelope truncated")
    header_len = _HEADER_LEN.unpack_from(blob, _BLOB_JSON_AT - 4)[0]
    json_end = _BLOB_JSON_AT + header_len
    prefix_len = json_end + _CHECKSUM_LEN
    if prefix_len > total:
        raise CorruptEntry("envelope truncated")
    # The header length was read from these very bytes, so the rest of the prefix is
    # constant: comparing it with one precomputed constant checks every byte (no pack per hit).
    if not blob.startswith(_BLOB_HEAD):
        raise CorruptEntry("file layout does not match the envelope")
    view = memoryview(blob)
    header = _header_of(view[_BLOB_JSON_AT:json_end])
    if total != prefix_len + header.length:
        raise CorruptEntry("file length does not match the envelope (truncated?)")
    return _verified(blob, view, header, _BLOB_JSON_AT, json_end, prefix_len, expected_key)


def _header_of(header_json: memoryview) -> EntryHeader:
    """The header from its JSON, every field's type checked (not yet verified).

    A field this version does not know is ignored (a later format may add one); a known
    field of the wrong type, a missing one or bytes that are not JSON are corrupt."""
    try:
        header = _HEADER_DECODER.decode(header_json)
    except msgspec.DecodeError as exc:
        raise CorruptEntry(f"envelope header unreadable: {exc}") from None
    if header.length < 0:
        raise CorruptEntry("envelope length is not a size")
    return header


def _verified(blob: bytes, view: memoryview, header: EntryHeader, json_at: int, json_end: int,
              payload_at: int, expected_key: str) -> Entry:
    """Check the checksum over the header JSON and the payload, then the key."""
    digest = xxhash.xxh3_128(view[json_at:json_end])
    digest.update(view[payload_at:])
    if digest.digest() != blob[json_end : json_end + _CHECKSUM_LEN]:
        raise CorruptEntry("checksum mismatch")
    if header.key != expected_key:
        raise CorruptEntry(f"stored under {header.key}, found at {expected_key}")
    return _entry(header, blob, payload_at)


def _entry(header: EntryHeader, blob: bytes, payload_offset: int) -> Entry:
    """``Entry(header, blob, payload_offset)`` without the frozen dataclass's ``__init__``
    (which sets each field through ``object.__setattr__``: ~1 µs of a ~5 µs disk hit)."""
    entry = _NEW(Entry)
    _SET_HEADER(entry, header)
    _SET_BLOB(entry, blob)
    _SET_OFFSET(entry, payload_offset)
    return entry


def _seal(header: EntryHeader, payload: bytes) -> tuple[bytes, bytes]:
    """The header's canonical JSON and the XXH3-128 over it and the payload."""
    header_json = json.dumps(header.fields(), sort_keys=True, separators=(",", ":"),
                             allow_nan=False).encode()
    checksum = xxhash.xxh3_128(header_json)
    checksum.update(payload)
    return header_json, checksum.digest()


def _envelope(magic: bytes, header_json: bytes, checksum: bytes) -> bytes:
    return _PREFIX.pack(magic, FORMAT_VERSION, 0, len(header_json)) + header_json + checksum


def _wav_prefix(header: EntryHeader, header_json: bytes, checksum: bytes) -> bytes:
    """Every byte of an audio entry before its samples, as ``audio_entry`` writes them."""
    envelope = _envelope(ENVELOPE_MAGIC, header_json, checksum)
    pad = b"\0" * (len(envelope) & 1)  # RIFF chunks are word-aligned
    block = header.channels * SAMPLE_WIDTH
    fmt = _FMT.pack(1, header.channels, header.sample_rate, header.sample_rate * block, block,
                    16)
    body = (
        b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        + b"vxch" + struct.pack("<I", len(envelope)) + envelope + pad
        + b"data" + struct.pack("<I", header.length)
    )
    return b"RIFF" + struct.pack("<I", len(body) + header.length) + body
