"""kill -9 at any instant leaves whole entries or none — never a torn one that is served."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from voxcache.cache import Cache
from voxcache.entry import decode
from voxcache.testing import forked
from voxcache.tiers.layout import TEMP_PREFIX

WRITER = Path(__file__).with_name("crash_writer.py")
sys.path.insert(0, str(WRITER.parent))
from crash_writer import payload  # noqa: E402


@pytest.mark.slow
def test_kill_9_never_leaves_a_servable_torn_entry(cache_dir):
    rng = random.Random(42)
    start = 0
    temp_seen = 0
    for _ in range(15):
        writer = forked.popen([sys.executable, str(WRITER), str(cache_dir), str(start)],
                              stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.4))
        writer.kill()
        writer.wait()
        start += 1000
        files = list((cache_dir / "objects").rglob("*"))
        temp_seen += sum(f.name.startswith(TEMP_PREFIX) for f in files)
        for path in files:
            if path.is_file() and not path.name.startswith(TEMP_PREFIX):
                key = path.name[:64]
                entry = decode(path.read_bytes(), key)  # every published file verifies
                assert bytes(entry.payload) == payload(int(key, 16))
    cache = Cache(cache_dir)
    cache.folder.startup_check.join(60)
    leftover = [f for f in (cache_dir / "objects").rglob(f"{TEMP_PREFIX}*")]
    assert not leftover, "temp files of dead writers are swept at start"
    published = [p for p in (cache_dir / "objects").rglob("*.wav")]
    assert published, "the writer stored something between kills"
    for path in published:
        key = path.name[:64]
        found = cache.get(key)
        assert found is not None and bytes(found[0].payload) == payload(int(key, 16))
    assert cache.folder.index.totals()[1] == len(published)  # index reconciled with files
    cache.close()
    print(f"temp files left by kills and later swept: {temp_seen}")
