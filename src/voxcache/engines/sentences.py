"""A plain sentence splitter for engines that have none of their own."""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[.!?。！？])\s+")


def split_sentences(text: str) -> list[str]:
    """Split after sentence-final punctuation followed by whitespace."""
    return [part for part in _BOUNDARY.split(text) if part]
