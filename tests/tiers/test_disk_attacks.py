"""The disk tier under attack and under real local faults.

Things planted at entry paths (symlinks, FIFOs, folders, huge files), a TTL that
runs out, an index locked by another process or damaged while in use, a folder
that turns read-only or runs out of inodes. Each must end as a miss, a stored
take or a quarantined file — never a read outside the cache, a hang, a 30 s
stall or an exception out of the request path.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.entry import audio_entry
from voxcache.request import SynthesisRequest as R
from voxcache.testing import forked
from voxcache.tiers.layout import entry_path


def take(i: int, frames: int = 500, **kwargs: object):
    pcm = np.full(frames, i, dtype="<i2").tobytes()
    return audio_entry(f"{i:064x}", Audio(pcm, 16000), **kwargs)  # type: ignore[arg-type]


def quarantined(cache: Cache) -> list[str]:
    return os.listdir(cache.root / "quarantine")


def stored_elsewhere(tmp_path: Path, blob: bytes) -> Path:
    outside = tmp_path / "outside.wav"
    outside.write_bytes(blob)
    return outside


# -- things planted at entry paths -------------------------------------------------------
@pytest.mark.parametrize("target", ["/etc/passwd", "valid-copy-outside"])
def test_a_symlink_at_an_entry_path_is_never_followed(cache, tmp_path, target):
    """Even a link to a byte-perfect copy of the right entry: the cache reads no file
    outside its folder, so the link is quarantined and the key is a miss."""
    e = take(1)
    path = entry_path(cache.root, e.header.key, "audio")
    path.parent.mkdir(parents=True, exist_ok=True)
    link_to = stored_elsewhere(tmp_path, e.blob) if target != "/etc/passwd" else Path(target)
    os.symlink(link_to, path)
    assert cache.get(e.header.key) is None
    assert not os.path.lexists(path)
    assert len(quarantined(cache)) == 1
    assert link_to.exists()  # the link was moved aside, never its target


def test_a_fifo_at_an_entry_path_neither_hangs_nor_serves(cache):
    e = take(2)
    path = entry_path(cache.root, e.header.key, "audio")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(cache.get(e.header.key)),
                              daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading a FIFO at an entry path hung"
    assert result == [None] and not os.path.lexists(path)


def test_a_folder_at_an_entry_path_is_quarantined_and_the_take_stored(cache_dir):
    """It used to be re-rendered forever: every read failed, every publish hit the name."""
    tone = ToneEngine()
    cached = CachedEngine(tone, Cache(cache_dir))
    try:
        key = cached.resolve_and_key(R("Mind the gap."))[1]
        path = entry_path(cache_dir, key, "audio")
        path.mkdir(parents=True)
        first = cached.synthesize(R("Mind the gap."))
        assert first.stored and path.is_file()
        cached.cache.in_process.clear()
        again = cached.synthesize(R("Mind the gap."))
        assert (again.cache, again.tier) == ("hit", "disk")
        assert len(tone.calls) == 1
    finally:
        cached.cache.close()


def test_a_huge_file_at_an_entry_path_is_not_read_into_memory(cache):
    e = take(3)
    path = entry_path(cache.root, e.header.key, "audio")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(3 << 30)  # sparse: 3 GiB that cost no disk, and must cost no memory
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    assert cache.get(e.header.key) is None
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < 256 * 1024, f"reading it grew the process by {grown // 1024} MiB"
    assert not os.path.lexists(path)


# -- TTL -----------------------------------------------------------------------------------
def test_an_expired_take_gives_way_to_the_next_one(cache_dir):
    """After a TTL ran out, the take used to be rendered on every request and never stored
    again (the expired file kept the name)."""
    tone = ToneEngine()
    cached = CachedEngine(tone, Cache(cache_dir))
    request = R("Today's special is soup.", ttl=0.5)
    try:
        first = cached.synthesize(request)
        time.sleep(0.6)
        cached.cache.in_process.clear()
        second = cached.synthesize(request)
        assert (second.cache, second.stored) == ("miss", True)
        cached.cache.in_process.clear()
        third = cached.synthesize(request)
        assert (third.cache, third.tier) == ("hit", "disk")
        assert third.entry.header.created > first.entry.header.created
        assert len(tone.calls) == 2
        cached.cache.folder.flush()
        rows = cached.cache.folder.index.rows("key = ?", [first.key])
        assert len(rows) == 1 and rows[0].expires == third.entry.header.expires
        assert cached.cache.gc()["expired"] == 0  # the new take is not collected
        assert cached.cache.get(first.key) is not None
    finally:
        cached.cache.close()


# -- the index locked or damaged -------------------------------------------------------------
LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


def test_an_index_locked_by_another_process_stalls_nothing(cache_dir):
    """A miss used to render, wait 30 s for the lock, then raise."""
    tone = ToneEngine()
    cached = CachedEngine(tone, Cache(cache_dir))
    cached.synthesize(R("Warm-up phrase."))
    locker = forked.popen([sys.executable, "-c", LOCKER, str(cache_dir / "index.sqlite3")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
        started = time.monotonic()
        result = cached.synthesize(R("A new phrase while the index is locked."))
        elapsed = time.monotonic() - started
        assert (result.cache, result.stored) == ("miss", True)
        assert elapsed < 10, f"the miss waited {elapsed:.1f} s on the locked index"
        cached.cache.in_process.clear()
        assert cached.synthesize(R("A new phrase while the index is locked.")).cache == "hit"
    finally:
        locker.communicate("done\n", timeout=30)
    cached.cache.folder.flush()  # the deferred row lands once the lock is gone
    assert cached.cache.folder.index.rows("key = ?", [result.key])
    cached.cache.close()


def damage(index: Path) -> None:
    """Overwrite every page but the header with garbage (after moving the WAL in)."""
    db = sqlite3.connect(index)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    size = index.stat().st_size
    with open(index, "r+b") as f:
        for page in range(1, size // 4096):
            f.seek(page * 4096)
            f.write(os.urandom(4096))


def test_an_index_damaged_while_serving_is_rebuilt_in_the_background(cache_dir):
    """Every miss used to raise "database disk image is malformed"."""
    tone = ToneEngine()
    cached = CachedEngine(tone, Cache(cache_dir))
    try:
        keys = {cached.synthesize(R(f"Platform {i} is now boarding.")).key for i in range(40)}
        cached.cache.folder.flush()
        damage(cache_dir / "index.sqlite3")
        fresh = cached.synthesize(R("A phrase after the damage."))
        assert (fresh.cache, fresh.stored) == ("miss", True)
        keys.add(fresh.key)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cached.cache.folder.flush()
            stats = cached.cache.stats()["tiers"]["disk"]
            if stats["entries"] == len(keys):
                break
            time.sleep(0.1)
        assert stats["entries"] == len(keys)
        indexed = {row.key for row in cached.cache.folder.index.rows()}
        assert indexed == keys
        assert any(name.startswith("index.sqlite3.") for name in quarantined(cached.cache))
        cached.cache.in_process.clear()
        assert cached.synthesize(R("Platform 3 is now boarding.")).cache == "hit"
    finally:
        cached.cache.close()


# -- a folder that turns read-only or runs out of inodes -----------------------------------------
UNPRIVILEGED = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all",
                "--bounding-set=-dac_override,-dac_read_search,-fowner"]
"""Root without the capabilities that ignore file modes: a 0500 folder is read-only to it."""

READ_ONLY_WORKER = """
import json, sys
from voxcache import Cache, CachedEngine, SynthesisRequest as R
from voxcache.engines.tone import ToneEngine
cached = CachedEngine(ToneEngine(), Cache(sys.argv[1]))
kept = cached.synthesize(R("Stored before the fault."))
print("ready", flush=True)
for line in sys.stdin:
    cached.cache.in_process.clear()
    result = cached.synthesize(R(line.strip()))
    print(json.dumps({"cache": result.cache, "stored": result.stored,
                      "frames": result.audio.frames}), flush=True)
"""


def test_a_cache_folder_that_turns_read_only_serves_takes_unstored(cache_dir):
    """The per-key lock file could not be made: a request used to fail with EACCES."""
    worker = subprocess.Popen([*UNPRIVILEGED, sys.executable, "-c", READ_ONLY_WORKER,
                               str(cache_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    folders = [cache_dir, *[p for p in cache_dir.rglob("*") if p.is_dir()]]
    try:
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read()  # type: ignore[union-attr]
        folders = [cache_dir, *[p for p in cache_dir.rglob("*") if p.is_dir()]]
        for folder in folders:
            folder.chmod(0o500)

        def ask(text: str) -> dict[str, object]:
            worker.stdin.write(text + "\n")  # type: ignore[union-attr]
            worker.stdin.flush()  # type: ignore[union-attr]
            line = worker.stdout.readline()  # type: ignore[union-attr]
            assert line, worker.stderr.read()  # type: ignore[union-attr]
            return json.loads(line)

        answer = ask("Rendered after the folder turned read-only.")
        assert (answer["cache"], answer["stored"]) == ("miss", False)
        assert answer["frames"] > 0
    finally:
        for folder in folders:
            folder.chmod(0o700)
        worker.stdin.close()  # type: ignore[union-attr]
        worker.wait(timeout=30)
    again = subprocess.run([*UNPRIVILEGED, sys.executable, "-c", READ_ONLY_WORKER,
                            str(cache_dir)], input="Stored once the folder is writable.\n",
                           capture_output=True, text=True, timeout=60)
    assert json.loads(again.stdout.splitlines()[1])["stored"] is True, again.stderr


def test_a_cache_folder_out_of_inodes_serves_takes_unstored(make_tmpfs, caplog):
    mount = make_tmpfs("inodes", size="8m", inodes=64)
    tone = ToneEngine()
    cached = CachedEngine(tone, Cache(mount / "cache"))
    try:
        filler = 0
        with pytest.raises(OSError):
            while True:  # use up every inode
                (mount / f"filler-{filler}").touch()
                filler += 1
        with caplog.at_level(logging.WARNING):
            for text in ("No inode left for this take or its lock.", "Nor for this one."):
                result = cached.synthesize(R(text))
                assert (result.cache, result.stored) == ("miss", False)
        assert not [p for p in (mount / "cache").rglob(".tmp-*")]
        # every fault counted, each cause logged once
        cached.cache.folder.flush()
        counts = cached.cache.stats()["counters"]  # persisted: what `voxcache stats` shows
        assert counts.get("lock_errors") == 2 and counts.get("write_errors") == 2, counts
        logged = [r.getMessage() for r in caplog.records if "logged once per cause" in
                  r.getMessage()]
        assert len([m for m in logged if "(lock: ENOSPC" in m]) == 1, logged
        assert len([m for m in logged if "(write: ENOSPC" in m]) == 1, logged
    finally:
        cached.cache.close()
