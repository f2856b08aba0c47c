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
from dataclasses import asdict, dataclass, field
from typing import Any

import xxhash

from .audio import SAMPLE_WIDTH, Audio

FORMAT_VERSION = 1
ENVELOPE_MAGIC = b"VXC1"
BLOB_MAGIC = b"VXCB"
_PREFIX = struct.Struct("<4sHHI")  # magic, format version, reserved, header length
_CHECKSUM_LEN = 16
_FMT = struct.Struct("<HHIIHH")  # PCM tag, channels, rate, byte rate, block align, bits


class CorruptEntry(Exception):
    """A stored object failed verification (internal: tiers turn it into a miss)."""


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """What the envelope records about its payload."""

    kind: str
    key: str
    created: float
    expires: float | None
    content_type: str
    length: int
    sample_rate: int = 0
    channels: int = 0
    sample_format: str = ""
    duration: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    """Descriptive fields (engine, voice, text preview) used to rebuild the index."""

    def expired(self, now: float) -> bool:
        """True once the entry's TTL has run out."""
        return self.expires is not None and now >= self.expires


@dataclass(frozen=True, slots=True)
class Entry:
    """A verified stored object: its header and the exact bytes that were stored."""

    header: EntryHeader
    blob: bytes
    """The whole stored file (for audio, a playable WAV)."""
    payload_offset: int

    @property
    def payload(self) -> memoryview:
        """The payload without copying it."""
        start = self.payload_offset
        return memoryview(self.blob)[start : start + self.header.length]

    @property
    def size(self) -> int:
        """Bytes this entry occupies in storage."""
        return len(self.blob)

    def audio(self) -> Audio:
        """Return the payload as canonical PCM audio."""
        return Audio(bytes(self.payload), self.header.sample_rate, self.header.channels)


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
    envelope = _envelope(ENVELOPE_MAGIC, header, audio.pcm)
    if len(envelope) % 2:
        envelope += b"\0"  # RIFF chunks are word-aligned
    block = audio.channels * SAMPLE_WIDTH
    fmt = _FMT.pack(1, audio.channels, audio.sample_rate, audio.sample_rate * block, block, 16)
    body = (
        b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        + b"vxch" + struct.pack("<I", len(envelope)) + envelope
        + b"data" + struct.pack("<I", len(audio.pcm))
    )
    blob = b"RIFF" + struct.pack("<I", len(body) + len(audio.pcm)) + body + audio.pcm
    return Entry(header, blob, len(blob) - len(audio.pcm))


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
    envelope = _envelope(BLOB_MAGIC, header, payload)
    return Entry(header, envelope + payload, len(envelope))


def decode(blob: bytes, expected_key: str) -> Entry:
    """Parse and verify a stored object; raise ``CorruptEntry`` on any mismatch."""
    if blob[:4] == b"RIFF":
        entry = _decode_wav(blob)
    elif blob[:4] == BLOB_MAGIC:
        header, offset = _parse_envelope(blob, 0, len(blob))
        entry = Entry(header, blob, offset)
        if offset + header.length != len(blob):
            raise CorruptEntry("payload length does not match the file")
        _check(blob, _PREFIX.size, entry)
    else:
        raise CorruptEntry("not a voxcache object (bad magic)")
    if entry.header.key != expected_key:
        raise CorruptEntry(f"stored under {entry.header.key}, found at {expected_key}")
    return entry


def _envelope(magic: bytes, header: EntryHeader, payload: bytes) -> bytes:
    header_json = json.dumps(asdict(header), sort_keys=True, separators=(",", ":")).encode()
    checksum = xxhash.xxh3_128(header_json)
    checksum.update(payload)
    prefix = _PREFIX.pack(magic, FORMAT_VERSION, 0, len(header_json))
    return prefix + header_json + checksum.digest()


def _parse_envelope(blob: bytes, start: int, end: int) -> tuple[EntryHeader, int]:
    """Return the header and the offset just past the envelope."""
    if end - start < _PREFIX.size:
        raise CorruptEntry("envelope truncated")
    _magic, version, _reserved, header_len = _PREFIX.unpack_from(blob, start)
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unknown entry format version {version}")
    body = start + _PREFIX.size
    stop = body + header_len + _CHECKSUM_LEN
    if stop > end:
        raise CorruptEntry("envelope truncated")
    try:
        header = EntryHeader(**json.loads(blob[body : body + header_len].decode()))
    except (ValueError, TypeError) as exc:
        raise CorruptEntry(f"envelope header unreadable: {exc}") from None
    return header, stop


def _check(blob: bytes, header_start: int, entry: Entry) -> None:
    """Verify the XXH3-128 over header JSON and payload."""
    (header_len,) = struct.unpack_from("<I", blob, header_start - 4)
    expected = blob[header_start + header_len : header_start + header_len + _CHECKSUM_LEN]
    checksum = xxhash.xxh3_128(memoryview(blob)[header_start : header_start + header_len])
    checksum.update(entry.payload)
    if checksum.digest() != expected:
        raise CorruptEntry("checksum mismatch")


def _decode_wav(blob: bytes) -> Entry:
    if len(blob) < 12 or blob[8:12] != b"WAVE":
        raise CorruptEntry("not a WAVE file")
    (riff_size,) = struct.unpack_from("<I", blob, 4)
    if riff_size + 8 != len(blob):
        raise CorruptEntry("RIFF size does not match the file (truncated?)")
    chunks = _wav_chunks(blob)
    if set(chunks) != {b"fmt ", b"vxch", b"data"}:
        raise CorruptEntry(f"unexpected WAV chunks {sorted(chunks)}")
    env_start, env_end = chunks[b"vxch"]
    if blob[env_start : env_start + 4] != ENVELOPE_MAGIC:
        raise CorruptEntry("WAV without a voxcache envelope")
    header, _ = _parse_envelope(blob, env_start, env_end)
    data_start, data_end = chunks[b"data"]
    entry = Entry(header, blob, data_start)
    if data_end - data_start != header.length:
        raise CorruptEntry("data chunk length does not match the envelope")
    _check_fmt(blob, chunks[b"fmt "][0], header)
    _check(blob, env_start + _PREFIX.size, entry)
    return entry


def _wav_chunks(blob: bytes) -> dict[bytes, tuple[int, int]]:
    chunks: dict[bytes, tuple[int, int]] = {}
    pos = 12
    while pos + 8 <= len(blob):
        name = blob[pos : pos + 4]
        (size,) = struct.unpack_from("<I", blob, pos + 4)
        start, end = pos + 8, pos + 8 + size
        if end > len(blob) or name in chunks:
            raise CorruptEntry(f"WAV chunk {name!r} is truncated or repeated")
        chunks[name] = (start, end)
        pos = end + (size & 1)
    if pos != len(blob):
        raise CorruptEntry("trailing bytes after the last WAV chunk")
    return chunks


def _check_fmt(blob: bytes, start: int, header: EntryHeader) -> None:
    tag, channels, rate, _byte_rate, _align, bits = _FMT.unpack_from(blob, start)
    if (tag, channels, rate, bits) != (1, header.channels, header.sample_rate, 16):
        raise CorruptEntry("fmt chunk disagrees with the envelope")
