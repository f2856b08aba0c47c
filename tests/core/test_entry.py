"""The envelope: standard files that verify on every read."""

from __future__ import annotations

import io
import random
import shutil
import subprocess

import numpy as np
import pytest
import soundfile

from voxcache.audio import Audio
from voxcache.entry import CorruptEntry, audio_entry, blob_entry, decode
from voxcache.testing.stored import undetected_flips

KEY = "ab" * 32


def take(frames: int = 8000) -> Audio:
    return Audio((np.arange(frames) % 2000 - 1000).astype("<i2").tobytes(), 22050)


def test_audio_entry_is_a_standard_wav_file():
    entry = audio_entry(KEY, take(), meta={"text": "hello"})
    samples, rate = soundfile.read(io.BytesIO(entry.blob), dtype="int16")
    assert rate == 22050
    assert samples.tobytes() == take().pcm


@pytest.mark.skipif(shutil.which("sox") is None, reason="sox not installed")
def test_sox_reads_the_entry_and_skips_the_private_chunk(tmp_path):
    path = tmp_path / "e.wav"
    path.write_bytes(audio_entry(KEY, take()).blob)
    out = subprocess.run(["sox", "--i", "-s", str(path)], capture_output=True, text=True,
                         check=True)
    assert int(out.stdout) == 8000


def test_round_trip_keeps_header_and_payload():
    entry = audio_entry(KEY, take(), ttl=60, meta={"voice": "alto"}, now=1000.0)
    back = decode(entry.blob, KEY)
    assert back.header == entry.header
    assert back.header.expires == 1060.0
    assert back.audio() == take()
    blob = blob_entry(KEY, "encoded", b"\x01\x02" * 100, "audio/mpeg")
    assert bytes(decode(blob.blob, KEY).payload) == b"\x01\x02" * 100


@pytest.mark.parametrize("make", [
    lambda: audio_entry(KEY, take()).blob,
    lambda: blob_entry(KEY, "encoded", b"x" * 5000, "audio/mpeg").blob,
])
def test_any_flipped_byte_is_detected(make):
    blob = make()
    rng = random.Random(7)
    edges = {0, 4, 8, 12, 20, 40, len(blob) - 1}
    positions = edges | {rng.randrange(len(blob)) for _ in range(300)}
    for pos in positions:
        bad = bytearray(blob)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(CorruptEntry):
            decode(bytes(bad), KEY)


@pytest.mark.parametrize("cut", [1, 2, 100, 7999, 8000])
def test_truncation_is_detected(cut):
    blob = audio_entry(KEY, take()).blob
    with pytest.raises(CorruptEntry):
        decode(blob[:-cut], KEY)


def test_an_entry_under_another_key_is_rejected():
    blob = audio_entry(KEY, take()).blob
    with pytest.raises(CorruptEntry, match="stored under"):
        decode(blob, "cd" * 32)


def test_foreign_wav_is_rejected():
    buf = io.BytesIO()
    soundfile.write(buf, np.zeros(100, dtype=np.int16), 16000, format="WAV")
    with pytest.raises(CorruptEntry):
        decode(buf.getvalue(), KEY)


@pytest.mark.parametrize("make", [
    lambda: audio_entry(KEY, take(frames=7), ttl=30, meta={"text": "hi"}).blob,  # odd pad
    lambda: audio_entry(KEY, take(frames=6), meta={"text": "hey"}).blob,
    lambda: blob_entry(KEY, "encoded", b"\x01\x02\x03", "audio/mpeg").blob,
])
@pytest.mark.parametrize("flip", [0x01, 0x80, 0xFF])
def test_every_byte_of_a_stored_file_is_covered(make, flip):
    """A flip at *any* offset — fmt byte rate and block align, the envelope's reserved
    field, the pad byte included — is detected (these eight bytes used to slip through)."""
    assert undetected_flips(make(), KEY, [flip]) == []


def test_an_appended_or_missing_byte_is_detected():
    blob = audio_entry(KEY, take(frames=7)).blob
    for bad in (blob + b"\0", blob[:-1], blob[:44], b"RIFF", b""):
        with pytest.raises(CorruptEntry):
            decode(bad, KEY)
