"""Memory and disk tiers: hits, promotion, corruption, rebuilds, eviction, TTL and pins."""

from __future__ import annotations

import os
import sqlite3
import sys

import numpy as np
import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.entry import audio_entry
from voxcache.errors import CacheDirError
from voxcache.request import SynthesisRequest as R
from voxcache.testing import forked
from voxcache.tiers import disk as disk_module
from voxcache.tiers.disk import DiskTier
from voxcache.tiers.layout import entry_path
from voxcache.tiers.lifecycle import sweep_temp_files
from voxcache.tiers.memory import MemoryTier


def entry(i: int, frames: int = 1000, ttl: float | None = None, now: float | None = None):
    pcm = np.full(frames, i, dtype="<i2").tobytes()
    return audio_entry(f"{i:064x}", Audio(pcm, 16000), ttl=ttl, now=now)


def test_second_request_is_a_memory_hit_with_the_same_samples(cached_tone, tone):
    first = cached_tone.synthesize(R("Good morning. Sunny today."))
    second = cached_tone.synthesize(R("Good morning.   Sunny today."))
    assert (first.cache, first.tier) == ("miss", "engine")
    assert (second.cache, second.tier) == ("hit", "memory")
    assert second.audio == first.audio
    assert len(tone.calls) == 1


def test_disk_hit_in_a_new_process(cache_dir, cached_tone):
    first = cached_tone.synthesize(R("Order forty-two, please."))
    cached_tone.cache.close()
    script = (
        "import sys; from voxcache.cache import Cache; from voxcache.cached import CachedEngine;"
        "from voxcache.engines.tone import ToneEngine; from voxcache.request import "
        "SynthesisRequest; e = ToneEngine(); c = CachedEngine(e, Cache(sys.argv[1]));"
        "r = c.synthesize(SynthesisRequest('Order forty-two, please.'));"
        "sys.stdout.buffer.write(f'{r.cache} {r.tier} {len(e.calls)} '.encode() + r.audio.pcm)"
    )
    out = forked.run([sys.executable, "-c", script, str(cache_dir)], capture_output=True,
                     check=True).stdout
    status, tier, calls, pcm = out.split(b" ", 3)
    assert (status, tier, calls) == (b"hit", b"disk", b"0")
    assert pcm == first.audio.pcm


def test_disk_hit_is_promoted_to_memory(cache):
    e = entry(1)
    cache.put(e)
    cache.in_process.clear()
    assert cache.get(e.header.key)[1] == "disk"
    assert cache.get(e.header.key)[1] == "memory"


def test_files_and_folders_are_private(cache):
    e = entry(2)
    cache.put(e)
    path = entry_path(cache.root, e.header.key, "audio")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert cache.root.stat().st_mode & 0o777 == 0o700


def test_flipped_byte_on_disk_is_quarantined_counted_and_rerendered(cached_tone, tone):
    request = R("Please keep your belongings with you.")
    first = cached_tone.synthesize(request)
    path = entry_path(cached_tone.cache.root, first.key, "audio")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    cached_tone.cache.in_process.clear()

    again = cached_tone.synthesize(request)
    assert (again.cache, again.tier) == ("miss", "engine")
    assert again.audio == first.audio
    assert len(tone.calls) == 2
    assert list((cached_tone.cache.root / "quarantine").iterdir())
    assert cached_tone.cache.stats()["counters"]["corruptions"] == 1


def test_truncated_file_is_a_miss(cached_tone, tone):
    first = cached_tone.synthesize(R("Doors closing."))
    path = entry_path(cached_tone.cache.root, first.key, "audio")
    path.write_bytes(path.read_bytes()[:-10])
    cached_tone.cache.in_process.clear()
    assert cached_tone.synthesize(R("Doors closing.")).cache == "miss"


def test_lost_index_is_rebuilt_from_the_files(cache_dir):
    cache = Cache(cache_dir)
    entries = [entry(i) for i in range(5)]
    for e in entries:
        cache.put(e)
    cache.pin(entries[0].header.key)
    cache.close()
    os.unlink(cache_dir / "index.sqlite3")
    rebuilt = Cache(cache_dir)
    rebuilt.folder.settle()  # the rebuild runs in the background
    rows = {r.key: r for r in rebuilt.folder.index.rows()}
    assert set(rows) == {e.header.key for e in entries}
    assert rows[entries[0].header.key].pinned  # pins survive a rebuild
    assert rebuilt.folder.index.totals() == (sum(e.size for e in entries), 5)
    rebuilt.close()


def test_corrupt_index_file_is_rebuilt(cache_dir):
    cache = Cache(cache_dir)
    cache.put(entry(1))
    cache.close()
    for suffix in ("-wal", "-shm"):
        (cache_dir / f"index.sqlite3{suffix}").unlink(missing_ok=True)
    (cache_dir / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    rebuilt = Cache(cache_dir)
    rebuilt.folder.settle()  # the rebuild runs in the background
    assert rebuilt.folder.index.totals()[1] == 1
    rebuilt.close()


def test_stale_temp_files_from_dead_writers_are_swept(cache_dir, cache):
    cache.folder.startup_check.join()  # the start-up sweep would race the one under test
    folder = cache_dir / "objects" / "ab" / "cd"
    folder.mkdir(parents=True)
    dead = folder / ".tmp-999999999-abc"
    live = folder / f".tmp-{os.getpid()}-def"
    dead.write_bytes(b"partial")
    live.write_bytes(b"in progress")
    assert sweep_temp_files(cache_dir) == 1
    assert not dead.exists() and live.exists()


def test_eviction_keeps_the_disk_under_its_cap_and_spares_pins(cache_dir):
    one = entry(0).size
    cache = Cache(cache_dir, CacheConfig(disk_max_bytes=10 * one))
    pinned = entry(0)
    cache.put(pinned)
    cache.pin(pinned.header.key)
    for i in range(1, 40):
        cache.put(entry(i))
        assert cache.folder.index.totals()[0] <= 10 * one
    keys = {r.key for r in cache.folder.index.rows()}
    assert pinned.header.key in keys
    assert entry(39).header.key in keys  # the newest survives
    assert cache.stats()["counters"]["evictions_size"] >= 29
    on_disk = [p for p in (cache_dir / "objects").rglob("*.wav")]
    assert len(on_disk) == len(keys)
    cache.close()


def test_frequently_hit_entries_survive_a_scan(cache_dir):
    one = entry(0).size
    cache = Cache(cache_dir, CacheConfig(disk_max_bytes=10 * one))
    hot = entry(1000)
    cache.put(hot)
    for _ in range(20):
        cache.in_process.clear()
        cache.get(hot.header.key)
    cache.folder.flush()
    for i in range(30):  # a one-off scan of new sentences
        cache.put(entry(i))
    assert cache.folder.get(hot.header.key) is not None
    cache.close()


def test_entry_count_cap(cache_dir):
    cache = Cache(cache_dir, CacheConfig(disk_max_entries=5))
    for i in range(12):
        cache.put(entry(i))
    assert cache.folder.index.totals()[1] <= 5
    cache.close()


def test_ttl_expires_in_every_tier(cache_dir):
    now = [1_000.0]
    cache = Cache(cache_dir, clock=lambda: now[0])
    e = entry(5, ttl=10, now=now[0])
    cache.put(e)
    assert cache.get(e.header.key) is not None
    now[0] += 11
    assert cache.in_process.get(e.header.key) is None
    assert cache.folder.get(e.header.key) is None
    assert cache.get(e.header.key) is None
    cache.close()


def test_gc_removes_expired_entries(cache_dir):
    cache = Cache(cache_dir)
    cache.put(entry(1, ttl=0.001, now=0.0))
    cache.put(entry(2))
    assert cache.gc()["expired"] == 1
    assert cache.folder.index.totals()[1] == 1
    cache.close()


def test_gc_drops_many_expired_entries_a_batch_per_write_lock(cache_dir, monkeypatch):
    """Expired entries are removed under the index's write lock (so a walk cannot index
    one in between); the lock is taken a batch at a time, so 600 expired files never
    stall every other writer for the whole sweep."""
    from voxcache.tiers import lifecycle

    cache = Cache(cache_dir)
    for i in range(600):
        cache.put(entry(1000 + i, ttl=0.001, now=0.0))
    holds: list[int] = []
    transaction = cache.folder.index.transaction

    def counted(*args, **kwargs):
        holds.append(0)
        return transaction(*args, **kwargs)

    removed = lifecycle._remove_entry

    def remove(*args, **kwargs):
        holds[-1] += 1
        return removed(*args, **kwargs)

    monkeypatch.setattr(cache.folder.index, "transaction", counted)
    monkeypatch.setattr(lifecycle, "_remove_entry", remove)
    assert cache.gc()["expired"] == 600
    monkeypatch.undo()
    assert sum(holds) == 600 and max(holds) <= lifecycle.BATCH
    assert cache.folder.index.totals() == (0, 0)
    cache.close()


def test_pinned_with_ttl_becomes_evictable_after_it(cache_dir):
    one = entry(0).size
    cache = Cache(cache_dir, CacheConfig(disk_max_bytes=3 * one))
    e = entry(0)
    cache.put(e)
    cache.pin(e.header.key, until=1.0)  # pin already over
    for i in range(1, 10):
        cache.put(entry(i))
    assert cache.folder.get(e.header.key) is None
    cache.close()


def test_memory_tier_keeps_each_kind_within_its_budget():
    entries = [entry(i, now=1.0) for i in range(10)]  # same created time: same size
    budget = 3 * entries[0].size
    tier = MemoryTier(budgets={"audio": budget})
    for e in entries:
        tier.put(e)
    stats = tier.stats()["audio"]
    assert stats["bytes"] <= budget and stats["entries"] == 3
    assert tier.get(entries[9].header.key) is not None
    assert tier.get(entries[0].header.key) is None


def test_index_is_only_an_accelerator_hits_work_without_it(cached_tone):
    first = cached_tone.synthesize(R("Mind the gap."))
    with sqlite3.connect(cached_tone.cache.root / "index.sqlite3") as db:
        db.execute("DELETE FROM entries")
    cached_tone.cache.in_process.clear()
    assert cached_tone.synthesize(R("Mind the gap.")).key == first.key
    assert cached_tone.synthesize(R("Mind the gap.")).cache == "hit"


def test_async_twin(cached_tone, tone):
    import asyncio

    async def run():
        results = await asyncio.gather(*(cached_tone.asynthesize(R("Stand clear.",
                                          params={"delay": 0.2})) for _ in range(10)))
        again = await cached_tone.asynthesize(R("Stand clear."))
        return results, again

    results, again = asyncio.run(run())
    assert len(tone.calls) == 1
    assert sorted({r.cache for r in results}) in (["joined", "miss"], ["hit", "joined", "miss"])
    assert (again.cache, again.tier) == ("hit", "memory")


def test_a_disk_tier_on_a_network_filesystem_is_refused_before_it_makes_anything(
        tmp_path, monkeypatch):
    """The disk tier itself refuses NFS/SMB (it relies on SQLite and flock), whoever opens
    it; a local mount in the same table is accepted."""

    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nnas:/export {tmp_path} nfs4 rw 0 0\n")
    monkeypatch.setattr(disk_module, "MOUNTS", str(mounts))
    with pytest.raises(CacheDirError, match=r"network filesystem \(nfs4\)"):
        DiskTier(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    local = tmp_path / "local-mounts"
    local.write_text("/dev/sda1 / ext4 rw 0 0\n")
    monkeypatch.setattr(disk_module, "MOUNTS", str(local))
    DiskTier(tmp_path / "cache").close()


def test_memory_hits_count_for_the_disk_tiers_eviction(cached_tone):
    """A phrase served from memory all day must not look cold to the disk tier's eviction
    (its hits used to be recorded only when the disk was read)."""
    first = cached_tone.synthesize(R("Hot in memory all day."))
    for _ in range(5):
        assert cached_tone.synthesize(R("Hot in memory all day.")).tier == "memory"
    cached_tone.cache.folder.flush()
    (row,) = cached_tone.cache.folder.index.rows("key = ?", [first.key])
    assert row.hits == 5
