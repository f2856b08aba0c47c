"""StageCache: keyed by content and every input, single flight, tenants walled off, purge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from voxcache.cache import Cache
from voxcache.stages import Clip, StageCache, StageInputs, stage_cached
from voxcache.stages.keys import voice_anchor
from voxcache.testing import forked
from voxcache.testing.servers import RedisServer, redis_available
from voxcache.testing.stored import stored_bytes

from .conftest import wav_bytes

WORKER = Path(__file__).with_name("stage_worker.py")


def tone_clip(freq: float = 220.0, seconds: float = 1.0, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return wav_bytes((0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)


def counting(stages: StageCache, calls: list[str], **kw):
    @stage_cached(stages, kind=kw.pop("kind", "embedding"), extractor="mean",
                  revision=kw.pop("revision", "1"))
    def extract(clip: Clip, scale: float = 1.0) -> np.ndarray:
        calls.append(clip.fingerprint)
        return clip.mono()[:64] * scale
    return extract


def test_every_input_is_in_the_key_and_nothing_else(stages: StageCache):
    calls: list[str] = []
    extract = counting(stages, calls)
    clip = tone_clip()
    assert extract(clip).cache == "miss"
    assert extract(clip).cache == "hit"
    assert extract(clip, scale=1.0).cache == "hit"  # an explicit default is the default
    for other in (dict(scale=2.0), dict(tenant="other"), dict(prompt_text="hello"),
                  dict(language="zh")):
        assert extract(clip, **other).cache == "miss", other
    assert counting(stages, calls, revision="2")(clip).cache == "miss"  # new weights
    assert extract(tone_clip(freq=330.0)).cache == "miss"
    assert len(calls) == 7
    with pytest.raises(TypeError, match="temperature"):
        extract(clip, temperature=0.5)


def test_hits_count_the_time_the_extractor_took(stages: StageCache, cache: Cache):
    @stage_cached(stages, kind="prompt", extractor="slow", revision="1")
    def slow(clip: Clip) -> np.ndarray:
        time.sleep(0.05)
        return clip.mono()[:16]

    first = slow(tone_clip())
    hit = slow(tone_clip())
    assert hit.cache == "hit" and hit.compute_seconds >= 0.05
    counts = stages.stats()["prompt"]
    assert counts["hits"] == 1 and counts["misses"] == 1
    assert counts["saved_us"] >= 50_000 and counts["bytes"] == first.entry.size
    cache.folder.flush()
    assert cache.stats()["counters"]["stage_prompt_hits"] == 1


def test_concurrent_callers_share_one_extraction(stages: StageCache):
    calls: list[int] = []
    gate = threading.Event()

    @stage_cached(stages, kind="embedding", extractor="gated", revision="1")
    def gated(clip: Clip) -> np.ndarray:
        calls.append(1)
        assert gate.wait(10)
        return clip.mono()[:8]

    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(gated(tone_clip()).cache))
               for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert sorted(results) == ["joined"] * 7 + ["miss"]


def test_two_processes_extract_once_and_a_restart_keeps_it(tmp_path: Path, cache_dir: Path):
    clip = tmp_path / "clip.wav"
    clip.write_bytes(tone_clip())
    markers = tmp_path / "markers"
    markers.mkdir()
    Cache(cache_dir).close()  # the folder exists before both start
    procs = [forked.popen([sys.executable, str(WORKER), str(cache_dir), str(clip),
                           str(markers)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert len(list(markers.iterdir())) == 1, "the extractor ran in both processes"
    assert sorted(o["cache"] for o in outs) == ["joined", "miss"]
    third = forked.run([sys.executable, str(WORKER), str(cache_dir), str(clip),
                        str(markers)], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(third.stdout)["cache"] == "hit"  # a new process: read from disk
    assert len(list(markers.iterdir())) == 1


def test_two_nodes_extract_once(tmp_path: Path) -> None:
    """Two nodes (folders of their own, one Redis) asking for one artifact at one instant:
    the node lease makes one of them extract it, the other reads it from Redis. (Stages used
    to take the machine's flock but not the node lease: both extracted.)"""
    if not redis_available():
        pytest.skip("needs redis-server (Debian package redis-server)")
    clip = tmp_path / "clip.wav"
    clip.write_bytes(tone_clip(freq=410.0))
    markers = tmp_path / "markers"
    markers.mkdir()
    with RedisServer(tmp_path / "redis") as redis:
        env = {**os.environ, "STAGE_TIERS": f"memory,disk,{redis.url}",
               "STAGE_START_AT": str(time.time() + 4.0)}  # after both processes loaded
        procs = [forked.popen([sys.executable, str(WORKER), str(tmp_path / node),
                               str(clip), str(markers)], stdout=subprocess.PIPE, text=True,
                              env=env) for node in ("node-a", "node-b")]
        outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert len(list(markers.iterdir())) == 1, "both nodes ran the extractor"
    assert sorted(o["cache"] for o in outs) in (["joined", "miss"], ["hit", "miss"])
    assert {o["tier"] for o in outs} <= {"extractor", "redis"}


def test_another_tenants_key_reads_like_an_absent_one(stages: StageCache, cache: Cache,
                                                     monkeypatch):
    mine = StageInputs("embedding", "enc", "1", "a" * 64, "tenant-a")
    stored = stages.get_or_compute(mine, lambda: np.ones(256, np.float32))
    theirs = StageInputs("embedding", "enc", "1", "a" * 64, "tenant-b")
    assert theirs.key() != stored.key  # the tenant is in the key: B never computes A's key
    cache.in_process.clear()  # A's entry on disk only: a probe must not read the file
    reads: list[str] = []
    original = cache.folder.get
    monkeypatch.setattr(cache.folder, "get", lambda key, kind="audio": (
        reads.append(key), original(key, kind))[1])
    assert stages.lookup(stored.key, "tenant-b", "embedding") is None
    assert stages.lookup("0" * 64, "tenant-b", "embedding") is None
    assert reads == []  # neither probe read a file: both end at the index lookup
    assert stages.stats()["embedding"]["hits"] == 0
    found = stages.lookup(stored.key, "tenant-a", "embedding")
    assert found is not None and reads == [stored.key]
    assert np.array_equal(found.artifact["embedding"], np.ones(256, np.float32))


def test_a_file_planted_under_the_callers_key_for_another_tenant_is_refused(
        stages: StageCache, cache: Cache):
    """The second wall: a valid entry of tenant A copied to the path of B's key."""
    a = StageInputs("embedding", "enc", "1", "a" * 64, "tenant-a")
    b = StageInputs("embedding", "enc", "1", "a" * 64, "tenant-b")
    from voxcache.tensors import tensor_entry

    planted = tensor_entry(b.key(), "embedding", {"embedding": np.zeros(4, np.float32)},
                           meta={"tenant": "tenant-a"})
    cache.put(planted, tenant="tenant-a")
    calls: list[int] = []
    result = stages.get_or_compute(b, lambda: (calls.append(1), np.ones(4, np.float32))[1])
    assert calls == [1] and result.cache in ("miss", "joined")
    assert a.key() != b.key()


def test_purge_by_voice_removes_every_artifact_of_that_voice_only(stages: StageCache,
                                                                  cache: Cache):
    voice, other = "1" * 64, "2" * 64
    kinds = {"embedding": np.ones(4, np.float32), "prompt": np.ones((2, 3), np.float32),
             "tokens": np.arange(5), "session": np.zeros(7, np.float32)}
    for fingerprint in (voice, other):
        for kind, value in kinds.items():
            stages.get_or_compute(StageInputs(kind, "x", "1", fingerprint, "acme"),
                                  lambda v=value: v)
    listed = stages.voice_artifacts("acme", voice)
    assert sorted(kind for _, kind in listed) == sorted(kinds)
    assert stages.voice_artifacts("someone-else", voice) == []
    assert stages.purge_voice("acme", voice) == 4
    for kind in kinds:
        assert cache.get(StageInputs(kind, "x", "1", voice, "acme").key(), kind) is None
        assert cache.get(StageInputs(kind, "x", "1", other, "acme").key(), kind) is not None
    stored = {StageInputs(k, "x", "1", fp, "acme").key() for k in kinds for fp in (voice, other)
              if stored_bytes(cache, StageInputs(k, "x", "1", fp, "acme").key(), k) is not None}
    assert stored == {StageInputs(k, "x", "1", other, "acme").key()
                      for k in kinds if k != "session"}
    assert stages.voice_artifacts("acme", voice) == []
    assert voice_anchor("acme", voice) != voice_anchor("other", voice)


PURGE = """
import sys
from voxcache.cache import Cache
from voxcache.stages import StageCache
cache = Cache(sys.argv[1])
print(StageCache(cache).purge_voice("acme", sys.argv[2]))
cache.close()
"""


def test_a_purge_reaches_another_process_memory(cache: Cache, stages: StageCache):
    """This process holds the embedding in memory; another process purges the voice; the
    invalidation log makes this one forget it (invalidations from one's own pid are
    ignored, so the purge must come from a real second process)."""
    inputs = StageInputs("embedding", "x", "1", "3" * 64, "acme")
    stages.get_or_compute(inputs, lambda: np.ones(4, np.float32))
    assert cache.in_process.contains(inputs.key(), "embedding")
    done = forked.run([sys.executable, "-c", PURGE, str(cache.root), "3" * 64],
                      capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "1"
    deadline = time.monotonic() + 10
    while cache.in_process.contains(inputs.key(), "embedding") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.get(inputs.key(), "embedding") is None
