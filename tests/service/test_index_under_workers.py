"""``voxcache serve --workers 2``: an index removed or replaced while they serve.

An attack deleted ``index.sqlite3`` under two workers: they disagreed (2 vs 7 of 14
entries) until restart; here they answered "index unavailable" for ever, each reconnecting
to a new empty file without tables. Every worker must notice within one flush interval
(``DiskTier`` flushes every 2 s; any statement notices at once), one rebuilds the index
from what is stored, and then every worker's ``/v1/stats`` agrees with the files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from voxcache.fsmode import locked
from voxcache.testing import forked

pytestmark = pytest.mark.slow

FLUSH_INTERVAL = 2.0
"""How often each worker's flusher looks at the index file (``DiskTier(flush_interval)``)."""
BOUND = FLUSH_INTERVAL + 3.0
"""Noticed within one flush interval, then the rebuild's walk of 14 takes (well under a
second when measured) and the answers of a loaded 2-core machine."""
STARTED = 60.0
"""How long both workers may take to answer at all (before any damage): a worker's start
took 14 s on this machine under load."""


def _replace_with_garbage(index: Path) -> None:
    garbage = index.with_name("garbage")
    garbage.write_bytes(os.urandom(40960))
    os.replace(garbage, index)


DAMAGES: dict[str, Callable[[Path], None]] = {
    "deleted": lambda index: index.unlink(),
    "deleted with its -wal and -shm": lambda index: [
        Path(f"{index}{suffix}").unlink(missing_ok=True) for suffix in ("", "-wal", "-shm")],
    "replaced by garbage": _replace_with_garbage,
    "its -wal deleted": lambda index: Path(f"{index}-wal").unlink(),
}


def _speak(url: str, text: str) -> None:
    answer = httpx.post(f"{url}/v1/audio/speech", json={"input": text, "response_format": "wav"},
                        timeout=60)
    assert answer.status_code == 200, answer.text


def _stored(root: Path) -> int:
    """The truth: takes stored as files (the tone engine's takes are too big to be inline)."""
    return sum(1 for path in (root / "objects").rglob("*.wav") if path.is_file())


def _entries_by_worker(url: str, asks: int = 12) -> dict[int, object]:
    """What each worker's ``/v1/stats`` says now (fresh connections: the kernel spreads them)."""
    seen: dict[int, object] = {}
    for _ in range(asks):
        stats = httpx.get(f"{url}/v1/stats", timeout=10).json()
        seen[stats.get("pid", 0)] = stats["tiers"]["disk"]["entries"]
    return seen


def _until_both_say(url: str, expected: int, seconds: float) -> tuple[float, dict[int, object]]:
    """Seconds until two workers each said ``expected`` (or the last answers, past
    ``seconds``)."""
    started = time.monotonic()
    agreed: dict[int, object] = {}
    while True:
        seen = _entries_by_worker(url)
        agreed.update({pid: n for pid, n in seen.items() if n == expected})
        for pid, n in seen.items():
            if n != expected:
                agreed.pop(pid, None)
        elapsed = time.monotonic() - started
        if len(agreed) >= 2 or elapsed > seconds:
            return elapsed, {**agreed, **seen}
        time.sleep(0.05)


def test_every_worker_agrees_with_the_files_soon_after_the_index_is_lost(
        serve_proc, tmp_path: Path) -> None:
    """Each damage in turn, under the same two workers: seven takes stored after it, then
    both workers' ``/v1/stats`` must count every take within the bound."""
    root = tmp_path / "cache"
    with serve_proc(root, "--workers", "2") as (url, _proc):
        for n in range(7):
            _speak(url, f"Before any loss, take {n}.")
        _elapsed, seen = _until_both_say(url, 7, STARTED)
        assert list(seen.values()) == [7, 7], seen

        for damage, inflict in DAMAGES.items():
            quarantined = len(os.listdir(root / "quarantine"))
            inflict(root / "index.sqlite3")
            for n in range(7):
                _speak(url, f"After the index was {damage}, take {n}.")
            stored = _stored(root)
            elapsed, seen = _until_both_say(url, stored, 30)
            assert list(seen.values()) == [stored, stored], \
                f"{damage}: after {elapsed:.1f} s the workers say {seen} of {stored}"
            assert elapsed < BOUND, f"{damage}: agreed {elapsed:.1f} s after the last take"
            if damage != "deleted with its -wal and -shm":  # what was left is kept
                assert len(os.listdir(root / "quarantine")) > quarantined, damage

        listed = forked.run([sys.executable, "-m", "voxcache", "--cache-dir", str(root),
                             "ls", "--json", "--limit", "100"], capture_output=True,
                            text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert len(json.loads(listed.stdout)) == _stored(root) == 7 * (1 + len(DAMAGES))


def test_idle_workers_rebuild_a_deleted_index_within_one_flush_interval(
        serve_proc, tmp_path: Path) -> None:
    """No request after the loss: the flushers alone notice it, and a new index holding
    every take is in place within the bound (read from outside, without asking a worker)."""
    root = tmp_path / "cache"
    index = root / "index.sqlite3"
    with serve_proc(root, "--workers", "2") as (url, _proc):
        for n in range(7):
            _speak(url, f"Stored before the loss, take {n}.")
        _elapsed, seen = _until_both_say(url, 7, STARTED)
        assert list(seen.values()) == [7, 7], seen
        index.unlink()  # from here on only the workers' flushers look at the index
        lost = time.monotonic()
        rebuilt = None
        while time.monotonic() - lost < BOUND:
            rebuilt = _rows_without_mark(index)
            if rebuilt == 7:
                break
            time.sleep(0.05)
        took = time.monotonic() - lost
        assert rebuilt == 7, f"{took:.1f} s after the loss the index says {rebuilt}"
        _elapsed, seen = _until_both_say(url, 7, 10)
        assert list(seen.values()) == [7, 7], seen


def _rows_without_mark(index: Path) -> int | None:
    """Rows of the index at ``index`` once no rebuild mark is left (None before), read
    with a read-only connection that creates nothing."""
    try:  # under the index's open lock, as every voxcache connection opens
        with locked(index.parent / "locks" / "index.lock", fcntl.LOCK_SH), \
                contextlib.closing(sqlite3.connect(f"{index.as_uri()}?mode=ro", uri=True,
                                                   timeout=1)) as db:
            if db.execute("SELECT 1 FROM policy WHERE name = 'rebuilding'").fetchone():
                return None
            return int(db.execute("SELECT count(*) FROM entries").fetchone()[0])
    except sqlite3.Error:
        return None
