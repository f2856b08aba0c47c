"""The soak benchmark's smoke run: every part of the mix ran, nothing erred, figures came out.

The soak itself (``python -m bench.chaos.soak --minutes 30``, one node and three) is a benchmark;
its figures are in docs/internals/reliability.md. This runs its machinery for 20 seconds on one
node.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from voxcache.testing.servers import redis_available

pytestmark = pytest.mark.slow


def test_a_short_soak_runs_every_part_of_the_mix(tmp_path: Path) -> None:
    if not redis_available():
        pytest.skip("needs redis-server")
    from bench.chaos.soak import soak

    summary = soak(1 / 3, 1, tmp_path)
    counts = summary["counts"]
    assert counts["errors"] == 0
    assert counts["hits"] > 100 and counts["misses"] > 5 and counts["purges"] > 3
    node = summary["nodes"]["node-0"]
    assert {"rss_mb", "anon_mb", "file_mb", "fds", "threads"} <= set(node)
    assert summary["failures"] == []  # each error would be kept with what it was
    assert all(Path(p).stat().st_size > 1000 for p in summary["plots"])
