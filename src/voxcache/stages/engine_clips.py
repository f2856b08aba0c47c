"""Reading an engine's reference argument (a path, bytes, a file object or a tensor) once,
to fingerprint what it *sounds like* — the engines key their own caches by the path
or a name, which is how they serve an old voice after the file changed.
"""

from __future__ import annotations

import io
import os
from typing import Any

import blake3
import numpy as np

from .clip import Clip

ASSUMED_TENSOR_RATE = 16000
"""A reference passed as a tensor carries no rate; the engines that take one (CosyVoice's
older ``prompt_speech_16k``) take 16 kHz mono."""


def clip_of(reference: Any) -> Clip:
    """A ``Clip`` for whatever an engine accepts as its reference audio.

    A path is read once (the engine reads it again itself on a miss); a file object
    is read and rewound; a tensor or array is fingerprinted from its samples, in the
    same form ``audio.fingerprint_reference`` hashes.
    """
    if isinstance(reference, (str, os.PathLike)):
        with open(reference, "rb") as handle:
            return Clip.of(handle.read())
    if isinstance(reference, (bytes, bytearray, memoryview)):
        return Clip.of(bytes(reference))
    if isinstance(reference, io.IOBase) or hasattr(reference, "read"):
        start = reference.tell()
        data = reference.read()
        reference.seek(start)
        return Clip.of(data)
    return _tensor_clip(reference)


def _tensor_clip(reference: Any) -> Clip:
    from ..tensors import as_numpy

    samples = np.ascontiguousarray(as_numpy(reference), dtype="<f4").reshape(-1, 1)
    hasher = blake3.blake3(f"pcm-f32le:{ASSUMED_TENSOR_RATE}:1:".encode())
    hasher.update(samples.tobytes())
    return Clip(b"", hasher.hexdigest(), ASSUMED_TENSOR_RATE, 1,
                samples.shape[0] / ASSUMED_TENSOR_RATE, _samples=samples)
