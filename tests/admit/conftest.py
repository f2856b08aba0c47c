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


import contextlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import httpx  # noqa: E402

from voxcache.testing.servers import free_port  # noqa: E402


@contextlib.contextmanager
def serve(cache_dir: Path, config: Path, *args: str, engine: str = "tone",
          env: dict[str, str] | None = None) -> Iterator[tuple[str, list[str]]]:
    """A real ``voxcache serve`` (clean ``VOXCACHE_*`` environment); yields its URL and,
    once the block ends and it has stopped, its whole output in the list."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VOXCACHE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "voxcache", "--cache-dir", str(cache_dir), "--engine", engine,
         "--config", str(config), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**clean, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    output: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"voxcache serve exited: {proc.stdout.read()}")  # type: ignore[union-attr]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "voxcache serve did not become ready"
            time.sleep(0.1)
        yield url, output
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        output.append(proc.stdout.read())  # type: ignore[union-attr]
