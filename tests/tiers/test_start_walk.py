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
from voxcache.entry import audio_entry, blob_entry
from voxcache.testing import forked
from voxcache.tiers import inline, lifecycle
from voxcache.tiers.layout import entry_path

HOLDER = textwrap.dedent("""
    import sys, time
    from voxcache.audio import Audio
    from voxcache.cache import Cache
    from voxcache.entry import audio_entry, blob_entry
    cache = Cache(sys.argv[1])
    cache.folder.startup_check.join()
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
        self.proc = forked.popen([sys.executable, "-c", HOLDER, str(root), self.key],
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
    cache.folder.startup_check.join(60)
    return cache


def plant_unindexed(root: Path, i: int) -> str:
    """A published file without its row: what a writer killed between the two leaves."""
    e = entry(i)
    path = entry_path(root, e.header.key, "audio")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(e.blob)
    return e.header.key


def indexed(cache: Cache, key: str) -> bool:
    return bool(cache.folder.index.rows("key = ?", (key,)))


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
    assert cache.folder.walk_reason is not None and "did not close" in cache.folder.walk_reason
    assert indexed(cache, key) and indexed(cache, holder.key)
    assert cache.stats()["counters"].get("folder_walks") == 1  # a new folder is not walked
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


@pytest.mark.parametrize("made", [False, True], ids=["missing", "empty"])
def test_a_new_folder_is_not_walked(cache_dir, walks, made):
    """Nothing to reconcile in a folder that held nothing; a walk there would only race
    the first writes (the CI failure of stop 17: a walk re-indexed an entry the collector
    had just removed)."""
    if made:
        cache_dir.mkdir()
    cache = start(cache_dir)
    assert walks[0] == 0 and cache.folder.walk_reason is None
    cache.put(entry(8))
    cache.close()
    again = start(cache_dir)  # and it counts as checked from then on
    assert walks[0] == 0 and again.get(entry(8).header.key) is not None
    again.close()


def test_a_folder_with_anything_in_it_is_not_new(cache_dir, walks):
    """An index left without its records (or any other content) is walked, not trusted."""
    key = plant_unindexed(cache_dir, 9)
    cache = start(cache_dir)
    assert walks[0] >= 1 and indexed(cache, key) and cache.folder.walk_reason is not None
    cache.close()


def stored_as(i: int, where: str):
    """A take stored as a file, or a small artifact stored as an inline record."""
    if where == "file":
        return entry(i)
    return blob_entry(f"{i:064x}", "encoded", bytes([i]) * 300, "audio/mpeg")


@pytest.mark.parametrize("where", ["file", "inline"])
def test_a_walk_never_indexes_an_entry_deleted_while_it_ran(cache_dir, monkeypatch, where):
    """A walk that lists the folder between a delete's two steps must not leave a row
    for the entry that delete removes: the entry goes first, then its row."""
    cache = start(cache_dir)
    e = stored_as(10, where)
    cache.put(e)
    key, kind = e.header.key, e.header.kind
    assert (entry_path(cache_dir, key, kind).exists()) == (where == "file")
    index = cache.folder.index
    remove = index.remove

    def remove_then_walk(keys, wait=None):
        removed = remove(keys, wait)
        lifecycle.reconcile(cache_dir, index)  # a walk in between the two steps
        return removed

    monkeypatch.setattr(index, "remove", remove_then_walk)
    assert cache.folder.delete(key, kind)
    monkeypatch.undo()
    assert not indexed(cache, key) and index.totals() == (0, 0)
    cache.close()


def test_a_walk_skips_an_entry_removed_after_it_verified_it(cache_dir, monkeypatch):
    """Between verifying a file and writing its row, the walk yields to a delete: the
    row is not written, since the entry is confirmed under the index's write lock."""
    cache = start(cache_dir)
    e = entry(11)
    key = plant_unindexed(cache_dir, 11)
    verify = lifecycle._row_of_file

    def verify_then_delete(root, index, k, path):
        row = verify(root, index, k, path)
        cache.folder.delete(k)
        return row

    monkeypatch.setattr(lifecycle, "_row_of_file", verify_then_delete)
    report = lifecycle.reconcile(cache_dir, cache.folder.index)
    assert report["added"] == 0 and not indexed(cache, key) and e.header.key == key
    assert cache.folder.index.totals() == (0, 0)
    cache.close()


@pytest.mark.parametrize("where", ["file", "inline"])
def test_a_walk_keeps_the_row_of_an_entry_stored_again_after_it_listed(cache_dir,
                                                                       monkeypatch, where):
    """The walk finds a row without its entry (stale), but a writer stores that key again
    between the walk's listing and its clean-up: the row must stay, or the take is served
    by key while the index (which purges by voice and tenant read) has forgotten it."""
    cache = start(cache_dir)
    e = stored_as(17, where)
    key, kind = e.header.key, e.header.kind
    cache.folder.put(e)
    if where == "file":  # the entry goes behind the index's back: its row is now stale
        entry_path(cache_dir, key, kind).unlink()
    else:
        assert inline.drop_record(cache_dir, key, kind)
    listing = lifecycle._stored_records  # listed after the files: the walk's last look

    def listed_then_stored_again(store):
        found = listing(store)
        assert cache.folder.put(e)
        return found

    monkeypatch.setattr(lifecycle, "_stored_records", listed_then_stored_again)
    report = lifecycle.reconcile(cache_dir, cache.folder.index)
    monkeypatch.undo()
    assert report["dropped"] == 0
    assert indexed(cache, key) and cache.folder.get(key, kind) is not None
    cache.close()


def test_a_planted_row_that_names_no_key_is_dropped_by_the_walk(cache_dir):
    """A row whose key is not hex (planted in the index by hand) names nothing stored: the
    walk drops it rather than failing on it."""
    from voxcache.tiers.index import IndexRow

    cache = start(cache_dir)
    planted = IndexRow(key="../not-a-key", kind="audio", size=1, created=1.0, expires=None,
                       last_access=1.0, hits=0, pinned=False, pin_until=None, tenant="",
                       engine="", model="", voice="", text="")
    assert cache.folder.index.add_many([planted]) == 1
    report = lifecycle.reconcile(cache_dir, cache.folder.index)
    assert report["dropped"] == 1 and cache.folder.index.rows() == []
    cache.close()


@pytest.mark.parametrize("where", ["file", "inline"])
def test_a_purge_between_a_write_and_its_row_leaves_no_row(cache_dir, monkeypatch, where):
    """Another process purges a key after this one published the take but before its row
    went in (that purge found no row to drop): the row must not go in for a take that is
    gone."""
    cache = start(cache_dir)
    other = start(cache_dir)  # the purging process's view of the same folder
    e = stored_as(15, where)
    key, kind = e.header.key, e.header.kind
    add = cache.folder.index.add

    def purged_first(row, *args, **kwargs):
        assert other.folder.delete(key, kind)
        return add(row, *args, **kwargs)

    monkeypatch.setattr(cache.folder.index, "add", purged_first)
    cache.folder.put(e)
    monkeypatch.undo()
    assert cache.folder.get(key, kind) is None
    assert cache.folder.index.rows() == [] and cache.folder.index.totals() == (0, 0)
    other.close()
    cache.close()


@pytest.mark.parametrize("where", ["file", "inline"])
def test_a_deferred_row_of_an_entry_removed_meanwhile_is_dropped(cache_dir, monkeypatch,
                                                                 where):
    """A row deferred because the index was locked is written by the flusher later; if
    the entry was removed in between (here by another process), the row is not written."""
    cache = start(cache_dir)
    other = start(cache_dir)
    e = stored_as(16, where)
    key, kind = e.header.key, e.header.kind

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(cache.folder.index, "add", locked)
    cache.folder.put(e)
    monkeypatch.undo()
    assert not indexed(cache, key)  # deferred
    other.folder.delete(key, kind)
    cache.folder.flush()
    assert cache.folder.index.rows() == [] and cache.folder.index.totals() == (0, 0)
    other.close()
    cache.close()


@pytest.mark.parametrize(("remover", "where"), [("expiry", "file"), ("eviction", "file"),
                                                ("eviction", "inline")])
def test_a_walk_racing_the_collector_leaves_no_row_without_an_entry(cache_dir, monkeypatch,
                                                                    remover, where):
    """The collector drops rows and then their entries; a walk run by another thread in
    between (made to happen exactly there) must not re-index an entry about to go. The
    collector removes the entries under the index's write lock, so the walk waits for it."""
    import threading

    cache = start(cache_dir)
    doomed = (audio_entry(f"{12:064x}", Audio(bytes(300), 16000), ttl=0.001, now=0.0)
              if remover == "expiry" else stored_as(13, where))
    cache.put(doomed)
    key, kind = doomed.header.key, doomed.header.kind
    walker = threading.Thread(target=lifecycle.reconcile, args=(cache_dir, cache.folder.index))
    real_entry_path = lifecycle.entry_path

    def walk_first(root, k, kind):
        if k == key and walker.ident is None:
            walker.start()
            walker.join(1.0)  # the old code: the walk ran to its end here
        return real_entry_path(root, k, kind)

    monkeypatch.setattr(lifecycle, "entry_path", walk_first)
    if remover == "expiry":
        assert cache.gc()["expired"] == 1
    else:
        limits = lifecycle.Limits(max_entries=0)
        assert lifecycle.enforce(cache_dir, cache.folder.index, limits)["count"] == 1
    walker.join(30)
    monkeypatch.undo()
    assert walker.ident is not None and not walker.is_alive()
    cache.in_process.clear()
    assert cache.folder.get(key, kind) is None
    assert cache.folder.index.rows() == [] and cache.folder.index.totals() == (0, 0)
    cache.close()


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
    from voxcache.tiers import openers

    return {"pid": os.getpid(), "boot": openers.boot_id(),
            "started": openers.start_time(os.getpid()), "host": os.uname().nodename,
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
    assert cache.folder.start_state.rebooted
    cache.folder.startup_check.join(60)
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
