"""The stored-object envelope, verified on every read from storage.

Audio entries are ordinary WAV files: ``RIFF/WAVE`` with ``fmt ``, a private
``vxch`` chunk holding the envelope, then ``data``. Players and ``sox`` skip
the unknown chunk, and a file server can hand the file out verbatim. Other
kinds use the same envelope followed directly by the payload (magic ``VXCB``).

The envelope records the format version, kind, the key the object was stored
under, created/expiry times, content type, audio metadata, the payload length
and an XXH3-128 checksum over header and payload. ``decode`` checks all of it:
a file moved under another key, flipped bits, a truncated write or a foreign
file all raise ``CorruptEntry`` — which the tiers turn into a miss plus a
quarantine, never into audio.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import asdict
from typing import Any

import xxhash

from .audio import SAMPLE_WIDTH, Audio
from .envelope import CorruptEntry, Entry, EntryHeader
from .tensors import decode_tensor_entry, looks_like_safetensors

__all__ = ["CorruptEntry", "Entry", "EntryHeader", "audio_entry", "blob_entry", "decode"]

FORMAT_VERSION = 1
ENVELOPE_MAGIC = b"VXC1"
BLOB_MAGIC = b"VXCB"
_PREFIX = struct.Struct("<4sHHI")  # magic, format version, reserved, header length
_CHECKSUM_LEN = 16
_FMT = struct.Struct("<HHIIHH")  # PCM tag, channels, rate, byte rate, block align, bits
_WAV_ENVELOPE_AT = 12 + 8 + _FMT.size + 8
"""Where the ``vxch`` envelope starts: after RIFF/WAVE, the ``fmt `` chunk and its own header."""


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
    """
    if blob[:4] == b"RIFF":
        magic, start = ENVELOPE_MAGIC, _WAV_ENVELOPE_AT
    elif blob[:4] == BLOB_MAGIC:
        magic, start = BLOB_MAGIC, 0
    else:
        if looks_like_safetensors(blob):  # tensor kinds: envelope in __metadata__
            return decode_tensor_entry(blob, expected_key)
        raise CorruptEntry("not a voxcache object (bad magic)")
    header, header_json, checksum = _parse_envelope(blob, start)
    if magic == ENVELOPE_MAGIC:
        if header.kind != "audio":
            raise CorruptEntry(f"a WAV envelope holding kind {header.kind!r}")
        prefix = _wav_prefix(header, header_json, checksum)
    else:
        prefix = _envelope(BLOB_MAGIC, header_json, checksum)
    if len(blob) != len(prefix) + header.length:
        raise CorruptEntry("file length does not match the envelope (truncated?)")
    if blob[: len(prefix)] != prefix:
        raise CorruptEntry("file layout does not match the envelope")
    digest = xxhash.xxh3_128(header_json)
    digest.update(memoryview(blob)[len(prefix):])
    if digest.digest() != checksum:
        raise CorruptEntry("checksum mismatch")
    if header.key != expected_key:
        raise CorruptEntry(f"stored under {header.key}, found at {expected_key}")
    return Entry(header, blob, len(prefix))


def _seal(header: EntryHeader, payload: bytes) -> tuple[bytes, bytes]:
    """The header's canonical JSON and the XXH3-128 over it and the payload."""
    header_json = json.dumps(asdict(header), sort_keys=True, separators=(",", ":"),
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


def _parse_envelope(blob: bytes, start: int) -> tuple[EntryHeader, bytes, bytes]:
    """Return the header, its JSON bytes and the stored checksum (not yet verified)."""
    if len(blob) < start + _PREFIX.size:
        raise CorruptEntry("envelope truncated")
    _magic, version, _reserved, header_len = _PREFIX.unpack_from(blob, start)
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unknown entry format version {version}")
    body = start + _PREFIX.size
    if body + header_len + _CHECKSUM_LEN > len(blob):
        raise CorruptEntry("envelope truncated")
    header_json = blob[body : body + header_len]
    try:
        header = EntryHeader(**json.loads(header_json.decode()))
    except (ValueError, TypeError) as exc:
        raise CorruptEntry(f"envelope header unreadable: {exc}") from None
    if not isinstance(header.length, int) or header.length < 0:
        raise CorruptEntry("envelope length is not a size")
    if header.kind == "audio" and not (
            isinstance(header.sample_rate, int) and isinstance(header.channels, int)
            and 0 < header.sample_rate < 2**31 and 0 < header.channels < 2**15):
        raise CorruptEntry("envelope audio format is out of range")
    checksum = blob[body + header_len : body + header_len + _CHECKSUM_LEN]
    return header, header_json, checksum
