"""The hit path stays fully verified after it was made cheap.

A tensor entry is verified without loading it through the safetensors library and
serialising it again: its header is compared with a reconstruction of what the library
writes. These tests hold that reconstruction to the installed library (every dtype numpy
arrays are written as, empty tensors that tie on their offsets, names that need escapes)
and show that a header the library would not write is refused even when it is the same
JSON (re-spaced, re-ordered, escaped otherwise, padded otherwise) or carries a valid
checksum over descriptors it would never write. The disk tier answers an inline hit
without building the file path it only needs when no record answers.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import xxhash

from voxcache import tensors
from voxcache.entry import CorruptEntry, Entry, decode
from voxcache.tensors import tensor_entry
from voxcache.testing.stored import undetected_flips
from voxcache.tiers import disk as disk_module
from voxcache.tiers.disk import DiskTier

KEY = "cd" * 32
DTYPES = (np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16, np.int32, np.uint32,
          np.float32, np.complex64, np.float64, np.int64, np.uint64)
"""Every numpy dtype the safetensors library writes."""
NAMES = ('qu"ote', "back\\slash", "new\nline", "\x01control", "del\x7f", "é-ü", "\u2028",
         "😀", 'a}"}b', "", "a", "B", "_")
"""Names serde_json escapes, writes raw, or that look like the end of the envelope."""


def every_dtype() -> dict[str, np.ndarray]:
    """One tensor of each dtype, plus empty ones that tie on their offsets."""
    rng = np.random.default_rng(7)
    tensors = {f"t{i}": (rng.standard_normal(5) * 50).astype(dtype)
               for i, dtype in enumerate(DTYPES)}
    tensors |= {f"empty{i}": np.zeros(0, dtype) for i, dtype in enumerate(DTYPES)}
    return tensors


def odd_names() -> dict[str, np.ndarray]:
    return {name: np.full(i % 3, i, np.int16 if i % 2 else np.float32)
            for i, name in enumerate(NAMES)}


CASES: dict[str, Callable[[], dict[str, np.ndarray]]] = {
    "every dtype": every_dtype,
    "names": odd_names,
    "no tensors": dict,
    "a scalar": lambda: {"s": np.array(3.5, np.float64)},
}


def parts(blob: bytes) -> tuple[bytes, bytes]:
    """A safetensors file's header (padding included) and data."""
    (length,) = struct.unpack_from("<Q", blob)
    return blob[8:8 + length], blob[8 + length:]


def with_header(header: bytes, data: bytes, pad: bytes = b" ") -> bytes:
    """A file with this header JSON, padded to 8 bytes with ``pad`` and its length fixed."""
    header += pad * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def rich_entry() -> Entry:
    return tensor_entry(KEY, "session", {
        "hidden": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
        "ids": np.arange(4, dtype=np.int64), 'we"ird\\': np.zeros(0, np.int8), "é": np.ones(1),
        "mask": np.array([True, False])}, meta={"tenant": "t", "text": "Grüße / \"hi\""})


# -- the reconstruction is the library's output ------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_what_the_library_writes_is_accepted(case: str) -> None:
    tensors = CASES[case]()
    entry = tensor_entry(KEY, "session", tensors, meta={"text": "naïve \"quote\" \\ /"})
    assert decode(entry.blob, KEY).header == entry.header
    loaded = safetensors.numpy.load(entry.blob)
    assert loaded.keys() == tensors.keys()
    for name, array in tensors.items():
        assert loaded[name].dtype == array.dtype  # (a scalar loads with shape (1,))
        assert np.array_equal(loaded[name].reshape(array.shape), array)


def test_verifying_a_tensor_entry_does_not_round_trip_through_the_library(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading and serialising again was ~15 µs of a ~23 µs hit: the check is done on the
    bytes, so a hit never calls into the library."""
    entry = rich_entry()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hit path called the safetensors library")

    monkeypatch.setattr(safetensors.numpy, "load", refuse)
    monkeypatch.setattr(safetensors.numpy, "save", refuse)
    assert decode(entry.blob, KEY).header == entry.header


def test_a_flip_at_every_offset_of_a_rich_entry_is_detected() -> None:
    entry = rich_entry()
    missed = undetected_flips(entry.blob, KEY, (0x01, 0x20, 0x80))
    assert missed == [], f"undetected flips at {missed[:5]} of {len(entry.blob)} bytes"


def test_a_header_checked_once_still_guards_every_later_read() -> None:
    """The checked header is remembered (a hot embedding's hit skips re-checking it), but
    each read still compares its header bytes with the remembered one and hashes the data:
    after a clean read, every flip, a move to another key and a cut are still refused."""
    entry = rich_entry()
    tensors._head.cache_clear()
    assert decode(entry.blob, KEY).header == entry.header  # remembered from here on
    missed = undetected_flips(entry.blob, KEY, (0x01, 0x80))
    assert missed == [], f"undetected flips at {missed[:5]} of {len(entry.blob)} bytes"
    for blob, key in ((entry.blob, "ef" * 32), (entry.blob[:-1], KEY),
                      (entry.blob + b"\0", KEY)):
        with pytest.raises(CorruptEntry):
            decode(blob, key)
    before = tensors._head.cache_info().hits
    assert decode(entry.blob, KEY).blob == entry.blob
    assert tensors._head.cache_info().hits > before  # the remembered header was used


def test_remembered_headers_are_bounded() -> None:
    """At most ``_HEADS`` headers of at most ``_HEAD_MEMO_MAX`` bytes: a stream of distinct
    entries, or one giant planted header, cannot grow the process."""
    tensors._head.cache_clear()
    for i in range(tensors._HEADS + 50):
        entry = tensor_entry(f"{i:064x}", "embedding", {"e": np.ones(2, np.float32)})
        decode(entry.blob, entry.header.key)
    assert tensors._head.cache_info().currsize == tensors._HEADS
    tensors._head.cache_clear()
    many = {f"t{i:04d}": np.ones(1, np.float32) for i in range(200)}  # a header over 4 KB
    big = tensor_entry(KEY, "session", many)
    assert struct.unpack_from("<Q", big.blob)[0] > tensors._HEAD_MEMO_MAX
    assert decode(big.blob, KEY).header == big.header
    assert tensors._head.cache_info().currsize == 0


# -- the same JSON, laid out otherwise -------------------------------------------------------
def relaid(entry: Entry, how: str) -> bytes:
    """The entry's file with a header that is the same JSON (and the same envelope text)
    as the library's, written another way; a file the library itself still loads."""
    header, data = parts(entry.blob)
    text = header.rstrip(b" ")
    parsed = json.loads(text)
    dump = dict(separators=(",", ":"), ensure_ascii=False)
    if how == "spaced":
        out = json.dumps(parsed, **dump).replace('":{"', '": {"').encode()  # type: ignore[arg-type]
    elif how == "indented":
        out = json.dumps(parsed, indent=1, ensure_ascii=False).encode()
    elif how == "fields reordered":
        out = json.dumps({k: v if k == "__metadata__" else dict(reversed(v.items()))
                          for k, v in parsed.items()}, **dump).encode()  # type: ignore[arg-type]
    elif how == "tensors reordered":
        names = [k for k in parsed if k != "__metadata__"]
        names[0], names[1] = names[1], names[0]
        out = json.dumps({"__metadata__": parsed["__metadata__"],
                          **{k: parsed[k] for k in names}}, **dump).encode()  # type: ignore[arg-type]
    elif how == "metadata last":
        out = json.dumps({**{k: v for k, v in parsed.items() if k != "__metadata__"},
                          "__metadata__": parsed["__metadata__"]}, **dump).encode()  # type: ignore[arg-type]
    elif how == "ascii escapes":
        out = json.dumps(parsed, separators=(",", ":")).encode()  # é as \u00e9, " as \"
    elif how == "slash escaped":
        out = text.replace(b"/", b"\\/", 1)
    elif how == "unicode escape":
        out = text.replace(b"checksum", b"\\u0063hecksum", 1)
    else:
        raise AssertionError(how)
    assert json.loads(out) == parsed and list(json.loads(out)) != [] and out != text
    return with_header(out, data)


@pytest.mark.parametrize("how", ["spaced", "indented", "fields reordered", "tensors reordered",
                                 "metadata last", "ascii escapes", "slash escaped",
                                 "unicode escape"])
def test_a_json_equal_header_laid_out_otherwise_is_corrupt(how: str) -> None:
    entry = rich_entry()
    blob = relaid(entry, how)
    assert safetensors.numpy.load(blob).keys() == safetensors.numpy.load(entry.blob).keys()
    with pytest.raises(CorruptEntry):
        decode(blob, KEY)


@pytest.mark.parametrize("pad", ["tabs", "newlines", "NULs", "8 more spaces", "none"])
def test_a_header_padded_otherwise_is_corrupt(pad: str) -> None:
    entry = tensor_entry(KEY, "embedding", {"embedding": np.ones(3, np.float32)})
    header, data = parts(entry.blob)
    text = header.rstrip(b" ")
    if len(header) == len(text):  # the header happens to need no padding: give it some
        entry = tensor_entry(KEY, "embedding", {"embedding": np.ones(3, np.float32)},
                             meta={"x": "y"})
        header, data = parts(entry.blob)
        text = header.rstrip(b" ")
    assert len(header) > len(text), "the fixture needs a padded header"
    blob = {"tabs": with_header(text, data, b"\t"),
            "newlines": with_header(text, data, b"\n"),
            "NULs": with_header(text, data, b"\0"),
            "8 more spaces": with_header(header + b" " * 8, data),
            "none": struct.pack("<Q", len(text)) + text + data}[pad]
    with pytest.raises(CorruptEntry):
        decode(blob, KEY)


# -- a valid checksum over descriptors the library never writes ------------------------------
def crafted(descriptors: dict[str, dict[str, Any]], data: bytes,
            header: dict[str, Any] | None = None) -> bytes:
    """A tensor entry laid out as the library lays out these descriptors (in this order),
    with a valid checksum over what the decoder hashes."""
    fields = {"kind": "embedding", "key": KEY, "created": 1000.0, "expires": None,
              "content_type": "application/x-safetensors", "length": len(data),
              "sample_rate": 0, "channels": 0, "sample_format": "", "duration": 0.0,
              "meta": {}, **(header or {})}
    header_json = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    digest = xxhash.xxh3_128(header_json)
    digest.update(b"\0" + json.dumps(descriptors, sort_keys=True, separators=(",", ":"))
                  .encode() + b"\0")
    digest.update(data)
    envelope = f'{{"checksum":"{digest.hexdigest()}","header":{header_json.decode()}}}'
    text = json.dumps({"__metadata__": {"voxcache": envelope}, **descriptors},
                      separators=(",", ":"), ensure_ascii=False).encode()
    return with_header(text, data)


def test_the_crafting_helper_writes_what_the_library_writes() -> None:
    tensors = {"b": np.arange(2, dtype=np.int64), "a": np.ones(3, np.float32)}
    entry = tensor_entry(KEY, "embedding", tensors, now=1000.0)
    descriptors = {"b": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
                   "a": {"dtype": "F32", "shape": [3], "data_offsets": [16, 28]}}
    assert crafted(descriptors, parts(entry.blob)[1]) == entry.blob


def one(dtype: str = "F32", shape: list[int] | None = None,
        offsets: list[int] | None = None, **extra: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [2] if shape is None else shape,
            "data_offsets": [0, 8] if offsets is None else offsets, **extra}


@pytest.mark.parametrize(("descriptors", "data"), [
    ({"x": one(offsets=[0, 4])}, b"\0" * 4),                    # size is not the shape's
    ({"x": one(offsets=[4, 12])}, b"\0" * 12),                  # not at the first offset
    ({"x": one(dtype="BF16", shape=[4])}, b"\0" * 8),           # a dtype numpy has not
    ({"y": one(), "x": one(offsets=[8, 16])}, b"\0" * 16),      # same dtype, names out of order
    ({"y": one(shape=[0], offsets=[0, 0]),
      "x": one(shape=[0], offsets=[0, 0])}, b""),               # empty ties, out of order
    ({"x": one(dtype="F64", shape=[1]), "y": one(dtype="I64", shape=[1], offsets=[8, 16])},
     b"\0" * 16),                                               # dtypes out of order
    ({"x": one(extra="field")}, b"\0" * 8),                     # a field it never writes
    ({"x": one(shape=[-2, -1])}, b"\0" * 8),                    # negative dimensions
    ({"x": one()}, b"\0" * 9),                                  # data past the last tensor
])
def test_descriptors_the_library_never_writes_are_corrupt(
        descriptors: dict[str, dict[str, Any]], data: bytes) -> None:
    with pytest.raises(CorruptEntry):
        decode(crafted(descriptors, data), KEY)


# -- the disk tier's hit path ------------------------------------------------------------------
def test_an_inline_hit_does_not_build_the_file_path(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tier = DiskTier(tmp_path / "cache", check_at_start=False)
    try:
        entry = tensor_entry(KEY, "embedding", {"embedding": np.ones(8, np.float32)})
        assert tier.put(entry)

        def no_path(kind: str) -> str:
            raise AssertionError("the file path was built for an inline hit")

        monkeypatch.setattr(disk_module, "suffix_of", no_path)
        got = tier.get(KEY, "embedding")
        assert got is not None and got.blob == entry.blob
        tier.flush()
        row = tier.rows("key = ?", (KEY,))
        assert row is not None and row[0].hits == 1  # the recency note was kept
    finally:
        tier.close()
