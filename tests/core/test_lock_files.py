"""Every lock file voxcache holds goes through ``fsmode.locked``: private, never a symlink.

The index's open lock, the invalidation log's, the walk, the inline store's, the index
repair's and the gateway's revision locks used to be opened each in its own way, some
following a symlink planted at the lock's path (creating the file it names, wherever).
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from voxcache.fsmode import locked


def test_a_lock_file_is_private_and_its_folders_too(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "deep" / "walk.lock"
    with locked(path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700


def test_a_symlink_planted_at_a_lock_path_is_refused_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "created-by-voxcache"
    target.parent.mkdir()
    path = tmp_path / "locks" / "invalidations.lock"
    path.parent.mkdir()
    path.symlink_to(target)
    with pytest.raises(OSError), locked(path):
        pass
    assert not target.exists()


def _hold(path: str, ready, release) -> None:
    with locked(path):
        ready.set()
        release.wait(30)


def test_a_wait_gives_up_with_timeout_error_and_shared_locks_share(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "gate.lock"
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(str(path), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(TimeoutError), locked(path, wait=0.2):
            pass
        with pytest.raises(TimeoutError), locked(path, fcntl.LOCK_SH, wait=0.2):
            pass
    finally:
        release.set()
        holder.join(30)
    with locked(path, fcntl.LOCK_SH), locked(path, fcntl.LOCK_SH, wait=0.2):
        pass  # two shared holders at once
    assert os.path.exists(path)


def test_a_cache_never_creates_the_file_a_planted_lock_symlink_names(tmp_path: Path) -> None:
    """Through the cache itself: the invalidation log's lock used to follow the link."""
    from voxcache.audio import Audio
    from voxcache.cache import Cache
    from voxcache.entry import audio_entry

    root, target = tmp_path / "cache", tmp_path / "elsewhere.txt"
    (root / "locks").mkdir(parents=True)
    (root / "locks" / "invalidations.lock").symlink_to(target)
    cache = Cache(root)
    try:
        key = "cd" * 32
        cache.put(audio_entry(key, Audio(b"\1\0" * 800, 16000)))
        assert cache.delete(key)  # published (or refused, counted): never through the link
        assert cache.get(key) is None
    finally:
        cache.close()
    assert not target.exists()


def test_a_symlink_planted_at_a_keys_render_lock_is_not_followed(tmp_path: Path) -> None:
    """The per-key render lock (``singleflight.key_lock``) opened its file following links:
    a link planted at ``locks/ab/<key>.lock`` made the cache create the file it names. Now
    the open refuses the link, and the render goes ahead without the lock (fail open)."""
    from voxcache.cache import Cache
    from voxcache.cached import CachedEngine
    from voxcache.engines.tone import ToneEngine
    from voxcache.request import SynthesisRequest

    root, target = tmp_path / "cache", tmp_path / "elsewhere.txt"
    cache = Cache(root)
    try:
        cached = CachedEngine(ToneEngine(), cache)
        request = SynthesisRequest("A lock file that is a link.")
        key = cached.resolve_and_key(request)[1]
        (root / "locks" / key[:2]).mkdir(parents=True, exist_ok=True)
        (root / "locks" / key[:2] / f"{key}.lock").symlink_to(target)
        result = cached.synthesize(request)
        assert result.cache == "miss" and result.stored
        assert cached.synthesize(request).cache == "hit"
    finally:
        cache.close()
    assert not target.exists()
