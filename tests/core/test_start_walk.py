"""A start walks the cache folder only after a crash.

The start-up check (reconcile: sweep temp and lock files, index unindexed files, drop rows
without files) walks every file: ~12 s at a million entries. After processes that all
closed cleanly there is nothing for it to repair, so the next start skips it; after any
process died without closing (kill -9), the next start walks. Processes are real: killed
with SIGKILL, not simulated.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.entry import audio_entry
from voxcache.tiers import lifecycle
from voxcache.tiers.layout import entry_path

HOLDER = textwrap.dedent("""
    import sys, time
    from voxcache.audio import Audio
    from voxcache.cache import Cache
    from voxcache.entry import audio_entry
    cache = Cache(sys.argv[1])
    cache.disk.startup_check.join()
    key = sys.argv[2]
    cache.put(audio_entry(key, Audio(bytes(200), 16000)))
    print("ready", flush=True)
    line = sys.stdin.readline()
    if line.strip() == "close":
        cache.close()
        print("closed", flush=True)
    else:
        time.sleep(60)
""")


def entry(i: int):
    return audio_entry(f"{i:064x}", Audio(bytes([i % 256]) * 300, 16000))


class Holder:
    """Another process with the cache folder open (a real interpreter)."""

    def __init__(self, root: Path, i: int) -> None:
        self.key = f"{i:064x}"
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), self.key],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "closed"
        self.proc.wait(10)


@pytest.fixture
def walks(monkeypatch):
    """How many times the folder's objects were walked (reconcile lists every file)."""
    count = [0]
    listing = lifecycle._stored_files

    def counted(root):
        count[0] += 1
        return listing(root)

    monkeypatch.setattr(lifecycle, "_stored_files", counted)
    return count


def start(root: Path) -> Cache:
    cache = Cache(root)
    cache.disk.startup_check.join(60)
    return cache


def plant_unindexed(root: Path, i: int) -> str:
    """A published file without its row: what a writer killed between the two leaves."""
    e = entry(i)
    path = entry_path(root, e.header.key, "audio")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(e.blob)
    return e.header.key


def indexed(cache: Cache, key: str) -> bool:
    return bool(cache.disk.index.rows("key = ?", (key,)))


def test_a_clean_close_lets_the_next_start_skip_the_walk(cache_dir, walks):
    cache = start(cache_dir)  # a new folder: checked once
    cache.put(entry(1))
    cache.close()
    walks[0] = 0
    for _ in range(3):
        again = start(cache_dir)
        assert again.get(entry(1).header.key) is not None
        again.close()
    assert walks[0] == 0


def test_a_kill_makes_the_next_start_walk_and_repair(cache_dir, walks):
    start(cache_dir).close()
    holder = Holder(cache_dir, 2)
    holder.kill()
    key = plant_unindexed(cache_dir, 3)  # as if the dead writer left it
    walks[0] = 0
    cache = start(cache_dir)
    assert walks[0] == 1
    assert cache.disk.walk_reason is not None and "did not close" in cache.disk.walk_reason
    assert indexed(cache, key) and indexed(cache, holder.key)
    assert cache.stats()["counters"].get("folder_walks") == 2  # the new folder's, and this
    cache.close()
    walks[0] = 0
    start(cache_dir).close()  # the walk cleared the dead record
    assert walks[0] == 0


def test_one_of_two_processes_killed_makes_the_next_start_walk(cache_dir, walks):
    start(cache_dir).close()
    survivor, victim = Holder(cache_dir, 4), Holder(cache_dir, 5)
    try:
        victim.kill()
        walks[0] = 0
        start(cache_dir).close()
        assert walks[0] == 1
        walks[0] = 0
        start(cache_dir).close()  # the survivor still runs: not a crash, nothing to walk
        assert walks[0] == 0
    finally:
        survivor.close()
    walks[0] = 0
    start(cache_dir).close()
    assert walks[0] == 0


def test_a_live_process_alone_does_not_make_a_start_walk(cache_dir, walks):
    start(cache_dir).close()
    other = Holder(cache_dir, 6)
    try:
        walks[0] = 0
        cache = start(cache_dir)
        assert walks[0] == 0
        assert cache.get(other.key) is not None
        cache.close()
    finally:
        other.close()


def test_a_folder_from_before_session_records_is_walked_once(cache_dir, walks):
    """An upgrade: the old version kept no records, so its history is unknown."""
    start(cache_dir).close()
    (cache_dir / "sessions" / "walked").unlink()
    key = plant_unindexed(cache_dir, 7)
    walks[0] = 0
    cache = start(cache_dir)
    assert walks[0] == 1 and indexed(cache, key)
    cache.close()
    start(cache_dir).close()
    assert walks[0] == 1


def write_record(root: Path, name: str, **fields: object) -> Path:
    path = root / "sessions" / name
    path.write_text(json.dumps(fields))
    return path


def my_identity() -> dict[str, object]:
    from voxcache.tiers import sessions

    return {"pid": os.getpid(), "boot": sessions.boot_id(),
            "started": sessions.start_time(os.getpid()), "host": os.uname().nodename,
            "unclean": False}


def test_a_reused_pid_does_not_pass_for_the_dead_process(cache_dir, walks):
    """The record names a pid that runs now (pid 1) but started at another time: the
    process that wrote it is gone."""
    start(cache_dir).close()
    ident = my_identity() | {"pid": 1, "started": "12345"}
    write_record(cache_dir, "1-deadbeef.json", **ident)
    walks[0] = 0
    start(cache_dir).close()
    assert walks[0] == 1


def test_a_record_from_before_the_last_boot_is_a_crash_of_the_machine(cache_dir, walks):
    start(cache_dir).close()
    write_record(cache_dir, "77-feedface.json", **(my_identity() | {"boot": "an-old-boot"}))
    walks[0] = 0
    cache = Cache(cache_dir)
    assert cache.disk.start_state.rebooted
    cache.disk.startup_check.join(60)
    assert walks[0] == 1
    cache.close()


@pytest.mark.parametrize("planted", ["symlink", "garbage", "fifo", "huge"])
def test_a_planted_record_is_never_followed_and_makes_a_walk(cache_dir, tmp_path, walks,
                                                             planted):
    """Anything but a record voxcache wrote counts as a crash (a walk costs seconds; a
    missed crash costs a wrong index); a symlink is not followed, and it is the link, not
    its target, that the walk removes."""
    start(cache_dir).close()
    target = tmp_path / "outside.json"
    target.write_text(json.dumps(my_identity()))  # a perfectly live record, outside
    path = cache_dir / "sessions" / "9-planted.json"
    if planted == "symlink":
        path.symlink_to(target)
    elif planted == "garbage":
        path.write_bytes(b"\x00{not json")
    elif planted == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b" " * 10_000_000)
    walks[0] = 0
    start(cache_dir).close()
    assert walks[0] == 1
    assert not os.path.lexists(path) and target.exists()


def test_a_close_that_could_not_write_its_rows_makes_the_next_start_walk(cache_dir, walks):
    """The index is locked by another process through the close: the row of a stored take
    never reaches it, so the session is not clean and the next start indexes the file."""
    cache = start(cache_dir)
    blocker = sqlite3.connect(cache_dir / "index.sqlite3", timeout=1, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        assert cache.put(entry(8))  # the row is deferred: the index is locked
        started = time.monotonic()
        cache.close()  # its flush waits out the lock (5 s), then gives up
        assert time.monotonic() - started < 30
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    walks[0] = 0
    cache = start(cache_dir)
    assert walks[0] == 1 and indexed(cache, entry(8).header.key)
    cache.close()


def test_records_are_private(cache_dir):
    cache = Cache(cache_dir)
    (record,) = (cache_dir / "sessions").glob("*.json")
    assert record.stat().st_mode & 0o777 == 0o600
    assert (cache_dir / "sessions").stat().st_mode & 0o777 == 0o700
    cache.close()
    assert not list((cache_dir / "sessions").glob("*.json"))
