"""Tensor entries are standard safetensors files, and every byte of one is verified."""

from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import load

from voxcache.cache import Cache
from voxcache.entry import CorruptEntry, decode
from voxcache.stages import StageCache, StageInputs
from voxcache.tensors import tensor_entry
from voxcache.testing.stored import overwrite_stored, stored_bytes, undetected_flips

KEY = "ab" * 32


def small_entry():
    return tensor_entry(KEY, "embedding", {
        "embedding": np.linspace(-1, 1, 8, dtype=np.float32),
        "tokens": np.arange(3, dtype=np.int64)}, meta={"tenant": "t", "reference": "f" * 64})


def test_a_flip_at_every_offset_is_detected():
    entry = small_entry()
    assert decode(entry.blob, KEY).header == entry.header
    missed = undetected_flips(entry.blob, KEY, (0x01, 0x80))
    assert missed == [], f"undetected flips at {missed[:5]} of {len(entry.blob)} bytes"


def test_truncation_and_another_key_are_refused():
    entry = small_entry()
    for cut in (1, 8, len(entry.blob) // 2, len(entry.blob) - 1):
        with pytest.raises(CorruptEntry):
            decode(entry.blob[:cut], KEY)
    with pytest.raises(CorruptEntry, match="stored under"):
        decode(entry.blob, "cd" * 32)


def test_a_foreign_safetensors_file_is_not_an_entry():
    from safetensors.numpy import save

    for metadata in (None, {"voxcache": "{}"}, {"voxcache": "x", "other": "y"}):
        with pytest.raises(CorruptEntry):
            decode(save({"embedding": np.zeros(4, np.float32)}, metadata=metadata), KEY)


def test_stored_file_opens_with_the_safetensors_library(cache: Cache, stages: StageCache):
    inputs = StageInputs("embedding", "fixed", "1", "f" * 64, "acme")
    stages.get_or_compute(inputs, lambda: {"embedding": np.ones(256, np.float32)})
    stored = stored_bytes(cache, inputs.key(), "embedding")  # inline: small; else a file
    assert stored is not None and cache.folder.path_of(inputs.key(), "embedding").suffix == (
        ".safetensors")
    assert load(stored)["embedding"].shape == (256,)
    assert b"pickle" not in stored and not stored.startswith(b"\x80")


def test_a_flipped_byte_on_disk_is_a_miss_quarantined_and_extracted_again(
        cache: Cache, stages: StageCache):
    calls = []
    inputs = StageInputs("prompt", "feat", "1", "e" * 64, "acme")

    def extract():
        calls.append(1)
        return {"feat": np.full((4, 80), 0.25, np.float32)}

    first = stages.get_or_compute(inputs, extract)
    path = cache.folder.path_of(first.key, "prompt")
    data = bytearray(stored_bytes(cache, first.key, "prompt") or b"")
    data[len(data) - 7] ^= 0x10  # a data byte: the tensor itself
    overwrite_stored(cache, first.key, "prompt", bytes(data))
    cache.in_process.clear()
    again = stages.get_or_compute(inputs, extract)
    assert (again.cache, len(calls)) == ("miss", 2)
    assert np.array_equal(again.artifact["feat"], first.artifact["feat"])
    assert any(name.startswith(path.name) for name in os.listdir(cache.root / "quarantine"))
    cache.folder.flush()
    assert cache.stats()["counters"].get("corruptions") == 1
