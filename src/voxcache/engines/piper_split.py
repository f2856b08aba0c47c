"""Piper's own sentence split, recovered as text and proven equal to what Piper renders.

espeak-ng decides where Piper's sentences end but reports phonemes, not offsets, so the
text is cut after sentence punctuation and pieces merged until each phonemizes to exactly
the next sentence of the whole. A chunk is a pure function of its phonemes, so then the
parts rendered one by one are the whole's samples; anything that does not verify returns
None and the request is served whole. docs/internals/segments.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_CANDIDATE = re.compile(r"(?<=[.!?;:…。！？])\s+")

Phonemize = Callable[[str], list[list[str]]]


def _sentences(phonemize: Phonemize, text: str) -> list[list[str]]:
    """The phoneme lists Piper renders (it skips empty ones)."""
    return [p for p in phonemize(text) if p]


def split_verified(phonemize: Phonemize, text: str) -> list[str] | None:
    """Return the text of each sentence Piper renders for ``text``, or None if unsure."""
    if "[[" in text:  # raw phoneme blocks are glued across sentences by Piper
        return None
    target = _sentences(phonemize, text)
    pieces = [p for p in _CANDIDATE.split(text) if p]
    if len(target) <= 1:
        return [text] if len(target) == 1 else None
    parts: list[str] = []
    pending = ""
    for piece in pieces:
        pending = f"{pending} {piece}" if pending else piece
        got = _sentences(phonemize, pending)
        if not got:
            continue
        if len(got) > 1 or len(parts) >= len(target):
            return None
        if got[0] == target[len(parts)]:
            parts.append(pending)
            pending = ""
    if pending or len(parts) != len(target):
        return None
    return parts
