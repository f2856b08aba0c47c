"""An index damaged between runs is never silently short, and its rebuild never holds a request.

The index (``index.sqlite3``) is an accelerator: caps, eviction, ``ls``, ``stats`` and pack
selection read it, hits do not. An attack found that an index truncated to 0 bytes between
runs was never rebuilt (300 takes served, ``stats`` counted 2), and others left the same
gap: a folder or an empty SQLite file at its path, a symlink (followed: the index was
written outside the cache folder), a file cut mid-page (``ls`` died with a traceback), a
log lost after a crash. Each damage is made here by hand between runs, on a folder filled
by a real process, and read back with the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.packs import sequence
from voxcache.request import SynthesisRequest as R
from voxcache.testing import forked
from voxcache.testing.cli import run_cli
from voxcache.tiers import lifecycle, purged, repair

TAKES = 120
FILL = textwrap.dedent("""
    import sys, time
    from voxcache import Cache, CachedEngine, SynthesisRequest as R
    from voxcache.engines.tone import ToneEngine
    cached = CachedEngine(ToneEngine(), Cache(sys.argv[1]))
    for i in range(int(sys.argv[2])):
        cached.synthesize(R(f"Stored take number {i}."))
    cached.cache.folder.flush()
    if sys.argv[3] == "hold":  # the index open with its log, until killed
        print("ready", flush=True)
        time.sleep(600)
    cached.cache.close()
""")


def cli(root: Path, *args: str) -> tuple[int, object]:
    done = run_cli(["--cache-dir", str(root), *args, "--json"])
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        return done.returncode, done.stdout + done.stderr


def what_the_cli_says(root: Path) -> tuple[int, int, set[str]]:
    """(entries, bytes) from ``stats`` and the keys ``ls`` lists, each command exiting 0."""
    code, stats = cli(root, "stats")
    assert code == 0, stats
    code, listed = cli(root, "ls", "--limit", "10000")
    assert code == 0, listed
    disk = stats["tiers"]["disk"]  # type: ignore[index]
    return disk["entries"], disk["bytes"], {row["key"] for row in listed}  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[int, int, set[str]]]:
    """A folder a real process stored ``TAKES`` takes in and closed, with what the CLI says
    of it before any damage (each test damages a copy)."""
    root = tmp_path_factory.mktemp("filled") / "cache"
    forked.run([sys.executable, "-c", FILL, str(root), str(TAKES), "close"], check=True,
               timeout=120)
    truth = what_the_cli_says(root)
    assert truth[0] == TAKES and len(truth[2]) == TAKES
    return root, truth


def _pages(index: Path, start: int, count: int) -> None:
    with open(index, "r+b") as f:
        f.seek(start * 4096)
        f.write(os.urandom(count * 4096))


def _empty_database(index: Path) -> None:
    index.unlink()
    with sqlite3.connect(index) as db:
        db.execute("PRAGMA user_version = 1")  # a valid SQLite file with no tables


DAMAGES: dict[str, Callable[[Path, Path], None]] = {
    # the attack: SQLite opens a zero-length file as an empty database
    "zero length": lambda index, _: os.truncate(index, 0),
    "garbage": lambda index, _: index.write_bytes(os.urandom(65536)),
    "truncated to half its pages": lambda index, _: os.truncate(
        index, index.stat().st_size // 2 // 4096 * 4096),
    "truncated mid-page": lambda index, _: os.truncate(index, index.stat().st_size - 1000),
    "deleted": lambda index, _: index.unlink(),
    "an empty SQLite file": lambda index, _: _empty_database(index),
    "a folder": lambda index, _: (index.unlink(), index.mkdir()),
    "a symlink to a file outside": lambda index, outside: (index.unlink(),
                                                           index.symlink_to(outside)),
    "damaged last pages": lambda index, _: _pages(index, index.stat().st_size // 4096 - 3, 3),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_the_cli_counts_and_lists_every_stored_take_after_damage_between_runs(
        filled, tmp_path: Path, damage: str) -> None:
    """Was: zero length, an empty SQLite file, a folder, a symlink → 0 entries (the symlink's
    target outside the folder written as an index); mid-page cut, damaged pages → ``ls``
    exit 1 with a traceback. Rebuilt at open before (and still): garbage, half, deleted."""
    source, truth = filled
    root = tmp_path / "cache"
    shutil.copytree(source, root, symlinks=True)
    outside = tmp_path / "outside.sqlite3"
    outside.write_bytes(b"")
    DAMAGES[damage](root / "index.sqlite3", outside)

    assert what_the_cli_says(root) == truth
    assert outside.read_bytes() == b"", "the index was written through a planted symlink"
    assert (root / "index.sqlite3").is_file() and not (root / "index.sqlite3").is_symlink()
    if damage not in ("deleted", "zero length", "an empty SQLite file"):
        assert any(n.startswith("index.sqlite3.") for n in os.listdir(root / "quarantine"))


def test_a_log_lost_after_a_crash_leaves_nothing_uncounted(tmp_path: Path) -> None:
    """A writer killed (-9) with rows still in ``-wal``; the log and ``-shm`` then deleted. The
    index is an older, consistent one; ``stats`` used to count the takes of the first run
    only (it did not wait for the start-up walk that adds the rest)."""
    root = tmp_path / "cache"
    forked.run([sys.executable, "-c", FILL, str(root), "40", "close"], check=True,
               timeout=120)
    writer = forked.popen([sys.executable, "-c", FILL, str(root), str(TAKES), "hold"],
                          stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert (root / "index.sqlite3-wal").stat().st_size > 0
    for suffix in ("-wal", "-shm"):
        (root / f"index.sqlite3{suffix}").unlink()
    entries, _bytes, keys = what_the_cli_says(root)
    assert (entries, len(keys)) == (TAKES, TAKES)


# -- the rebuild runs in the background ------------------------------------------------------
BACKGROUND = ["zero length", "garbage", "truncated to half its pages", "deleted", "a folder",
              "a symlink to a file outside"]


@pytest.mark.parametrize("damage", BACKGROUND)
def test_opening_a_damaged_index_never_waits_for_its_rebuild(
        filled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """The rebuild walks every stored entry (minutes for a large folder). It used to run
    inside the open, so a start (and every request behind it) waited for it; the walk is
    held here until the test has been served a hit and a stored miss."""
    source, (entries, _bytes, keys) = filled
    root = tmp_path / "cache"
    shutil.copytree(source, root, symlinks=True)
    outside = tmp_path / "outside.sqlite3"
    outside.write_bytes(b"")
    DAMAGES[damage](root / "index.sqlite3", outside)

    walking, release = threading.Event(), threading.Event()
    real = lifecycle.reconcile

    def held_walk(*args, **kwargs):  # type: ignore[no-untyped-def]
        walking.set()
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "reconcile", held_walk)  # the walk a rebuild runs
    monkeypatch.setattr(repair, "reconcile", held_walk, raising=False)
    opened: list[Cache] = []
    opener = threading.Thread(target=lambda: opened.append(Cache(root)), daemon=True)
    opener.start()
    opener.join(20)
    assert opened, "opening the cache waited for the index to be rebuilt"
    cache = opened[0]
    try:
        assert walking.wait(20), "no rebuild started"
        cached = CachedEngine(ToneEngine(), cache)
        hit = cached.synthesize(R("Stored take number 7."))
        assert (hit.cache, hit.tier) == ("hit", "disk")
        miss = cached.synthesize(R("A new take while the index is rebuilt."))
        assert (miss.cache, miss.stored) == ("miss", True)
        assert cache.folder.health().state == "degraded"
        release.set()
        cache.folder.settle()
        stats = cache.stats()["tiers"]["disk"]
        assert stats["entries"] == entries + 1
        assert {row.key for row in cache.folder.index.rows()} == keys | {miss.key}
        assert cache.folder.health().state == "ok"
    finally:
        release.set()
        cache.close()


# -- the checks never take SQLite's locks away -------------------------------------------------
CLOSER = ("import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
          "db.execute('SELECT count(*) FROM entries').fetchone(); db.close()")


def test_looking_at_the_index_file_never_drops_the_locks_sqlite_holds_on_it(cache_dir) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process holds on it,
    SQLite's included; another process closing its connection then takes itself for the
    last one and removes the ``-wal`` and ``-shm`` still in use here (seen as pages of one
    table read as another's under two workers). Reading the index's header on every flush
    did that, and so did opening a second cache on the folder in the same process (the
    database file was opened to make sure it exists, then closed)."""
    cache = Cache(cache_dir)
    try:
        cached = CachedEngine(ToneEngine(), cache)
        cached.synthesize(R("A take whose row is in the log."))
        cache.folder.startup_check.join()  # type: ignore[union-attr]
        cache.folder.flush()  # the index file is looked at (the watch)
        again = Cache(cache_dir)  # a second cache on the folder, in this process
        again.folder.startup_check.join()  # type: ignore[union-attr]
        again.close()
        index = cache_dir / "index.sqlite3"
        forked.run([sys.executable, "-c", CLOSER, str(index)], check=True, timeout=60)
        assert (cache_dir / "index.sqlite3-wal").exists(), "another process removed the log"
        assert (cache_dir / "index.sqlite3-shm").exists()
        assert cached.synthesize(R("A second take.")).stored
        assert cache.stats()["tiers"]["disk"]["entries"] == 2
    finally:
        cache.close()


@pytest.mark.parametrize("damage", ["deleted", "renamed over by garbage"])
def test_purged_keys_and_pack_sequences_survive_an_index_lost_under_a_running_process(
        cache_dir, damage: str) -> None:
    """They are not in the files, so a rebuild from the files cannot bring them back, and a
    lost tombstone lets an older pack bring a purged take back. The process that had the
    index open still reads the file it left through its connection: the rebuild carries
    them over from there (the old file itself is gone, or garbage)."""
    cache = Cache(cache_dir)
    try:
        cached = CachedEngine(ToneEngine(), cache)
        take = cached.synthesize(R("A take purged before the index is lost."))
        purged.record(cache.folder.index, [(take.key, "audio", 1e9)], covering=True)
        sequence.admit(cache.folder.index, "publisher-key", 123_456, "digest")
        cache.count("hits_disk", 5)
        cache.folder.flush()
        index = cache_dir / "index.sqlite3"
        if damage == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{index}{suffix}").unlink(missing_ok=True)
        else:
            (cache_dir / "garbage").write_bytes(os.urandom(65536))
            os.replace(cache_dir / "garbage", index)
        cache.stats()  # a statement: the loss is noticed, a rebuild starts
        cache.folder.settle()
        assert purged.lookup(cache.folder.index, take.key) is not None
        assert cache.folder.index.query("SELECT sequence FROM pack_sequences WHERE key_id = ?",
                                      ("publisher-key",)) == [(123_456,)]
        assert cache.folder.counters()["hits_disk"] >= 5  # type: ignore[index]
        assert cache.stats()["tiers"]["disk"]["entries"] == 1
    finally:
        cache.close()
