"""Helpers for the storing gate's tests: search a folder's every byte for text."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from voxcache.testing.servers import serve_process


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


@contextlib.contextmanager
def serve(cache_dir: Path, config: Path, *args: str, engine: str = "tone",
          env: dict[str, str] | None = None) -> Iterator[tuple[str, list[str]]]:
    """A real ``voxcache serve``; yields its URL and, once the block ends and it has
    stopped, its whole output in the list."""
    output: list[str] = []
    with serve_process(cache_dir, *args, engine=engine, config=config, env=env) as (url, proc):
        try:
            yield url, output
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            output.append(proc.stdout.read())  # type: ignore[union-attr]  # piped: never None
