"""Helpers for the storing gate's tests: search a folder's every byte for text."""

from __future__ import annotations

import os
from pathlib import Path


def leaks(folder: Path, needles: list[str]) -> list[tuple[str, str]]:
    """(file, needle) for every file under ``folder`` holding a needle (UTF-8, and UTF-16
    for what SQLite might store that way), SQLite write-ahead logs and LMDB included."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for needle in needles:
                if needle.encode() in data or needle.encode("utf-16-le") in data:
                    found.append((str(path.relative_to(folder)), needle))
    return found
