"""Envelopes crafted to pass the checksum but not the rules: the fast decode refuses them.

A checksum proves the bytes are the ones the writer hashed; it says nothing about
whether the writer was voxcache. Anyone who can write in the cache folder can craft an
entry with a valid XXH3 over a header voxcache would never write. These must still end
as ``CorruptEntry`` (a miss and a quarantine), never as an exception of another type out
of ``decode`` or as a header whose fields have types the rest of the code does not expect.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
import xxhash

from voxcache.audio import Audio
from voxcache.entry import CorruptEntry, audio_entry, blob_entry, decode
from voxcache.testing.stored import undetected_flips

KEY = "ab" * 32


def header_of(**changes: Any) -> dict[str, Any]:
    base = {"kind": "audio", "key": KEY, "created": 1000.0, "expires": None,
            "content_type": "audio/wav", "length": 4, "sample_rate": 22050, "channels": 1,
            "sample_format": "s16le", "duration": 0.0, "meta": {}}
    return {**base, **changes}


def crafted_wav(header: dict[str, Any], pcm: bytes = b"\x01\x00\x02\x00") -> bytes:
    """A WAV entry laid out as voxcache lays it out, with a valid checksum over whatever
    header it is given (the byte rate wraps to 32 bits where it would not fit)."""
    header_json = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    digest = xxhash.xxh3_128(header_json)
    digest.update(pcm)
    envelope = struct.pack("<4sHHI", b"VXC1", 1, 0, len(header_json)) + header_json
    envelope += digest.digest()
    pad = b"\0" * (len(envelope) & 1)
    channels, rate = int(header["channels"]), int(header["sample_rate"])
    block = channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels & 0xFFFF, rate & 0xFFFFFFFF,
                      (rate * block) & 0xFFFFFFFF, block & 0xFFFF, 16)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"vxch"
            + struct.pack("<I", len(envelope)) + envelope + pad + b"data"
            + struct.pack("<I", len(pcm)))
    return b"RIFF" + struct.pack("<I", len(body) + len(pcm)) + body + pcm


def test_the_crafting_helper_writes_what_voxcache_writes():
    """Otherwise the refusals below could be refusals of the helper's own mistakes."""
    header = header_of()
    ours = audio_entry(KEY, Audio(b"\x01\x00\x02\x00", 22050), now=1000.0)
    header["duration"] = ours.header.duration
    assert crafted_wav(header) == ours.blob
    assert decode(crafted_wav(header), KEY).header == ours.header


def test_a_byte_rate_that_overflows_the_wav_field_is_corrupt_not_a_crash():
    """sample rate × block align over 32 bits: the layout cannot be rebuilt, so the entry
    is refused as corrupt (it used to raise struct.error out of decode)."""
    blob = crafted_wav(header_of(sample_rate=2**31 - 1, channels=2**14))
    with pytest.raises(CorruptEntry):
        decode(blob, KEY)


@pytest.mark.parametrize("field, value", [
    ("content_type", 7),           # the service sends it as a header
    ("meta", ["not", "a", "map"]),  # the index reads meta.get(...)
    ("created", "yesterday"),
    ("expires", "never"),          # expiry compares it with a float
    ("duration", {"s": 1}),
    ("sample_format", 16),
    ("length", True),              # a bool is not a size
])
def test_a_header_field_of_the_wrong_type_is_corrupt(field, value):
    blob = crafted_wav(header_of(**{field: value}))
    with pytest.raises(CorruptEntry):
        decode(blob, KEY)


def test_a_header_that_is_not_json_is_corrupt():
    entry = blob_entry(KEY, "encoded", b"payload", "audio/mpeg")
    start = 12
    bad = bytearray(entry.blob)
    bad[start] = 0xFF  # not UTF-8, not JSON; the checksum would catch it too
    with pytest.raises(CorruptEntry):
        decode(bytes(bad), KEY)


@pytest.mark.parametrize("make", [
    lambda: audio_entry(KEY, Audio(b"\x05\x00" * 3, 16000), ttl=30,
                        meta={"text": "ünïcode ✓", "voice": "alto", "tenant": "t1"}).blob,
    lambda: blob_entry(KEY, "encoded", bytes(range(256)), "audio/ogg",
                       meta={"parent": "cd" * 32}).blob,
])
def test_every_offset_of_entries_with_rich_headers_is_covered(make):
    """The flip-every-offset rule on headers with non-ASCII text and nested meta: the
    header bytes are verified by the checksum, every other byte by the rebuilt layout."""
    assert undetected_flips(make(), KEY, (0x01, 0x80)) == []
