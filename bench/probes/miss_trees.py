"""``python -m bench.probes.miss_trees TREE [TREE ...]``: a miss's own cost, tree by tree.

The ``misses`` benchmark's overhead row runs on the benchmark's scratch folder, where this
VM's ext4 (file and folder creation at 0.4 ms and more under load) swamps a change of a few
hundred microseconds in voxcache's code. This one measures the same thing — a miss with an
engine that replays Piper's audio instantly: key, lookup, flight, lock, re-check, seal,
publish, index, memory, alias — on tmpfs, for several source trees (``git worktree add``),
interleaved round by round so that the machine's drift hits every tree alike. Each round is
a fresh process per tree: ``PYTHONPATH=TREE/src``, 800 misses after 20 warm-up ones.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

ROUNDS = 5
MISSES = 800
TEXT = ("please stand clear of the closing doors the next train to the airport departs from "
        "platform four in six")


def one_tree(misses: int) -> float:
    """Median seconds of ``misses`` misses with the voxcache on ``sys.path`` (tmpfs)."""
    from piper.config import SynthesisConfig

    from voxcache.audio import Audio
    from voxcache.cache import Cache
    from voxcache.cached import CachedEngine
    from voxcache.engine import Engine
    from voxcache.engines.piper import PiperEngine
    from voxcache.request import SynthesisRequest

    piper = PiperEngine(threads=1)
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    chunks = [Audio(c.audio_int16_bytes, c.sample_rate, c.sample_channels)
              for c in piper.voice.synthesize(TEXT, config)]

    class Replay(Engine):
        def __init__(self) -> None:
            for name in ("id", "model_revision", "sample_rate", "params", "languages",
                         "default_language", "voices", "default_voice"):
                setattr(self, name, getattr(piper, name))

        def render(self, request: object) -> Iterator[Audio]:
            yield from chunks

    params = {"noise_scale": 0.0, "noise_w_scale": 0.0}
    with tempfile.TemporaryDirectory(dir="/dev/shm") as folder:
        cache = Cache(folder)
        cached = CachedEngine(Replay(), cache)
        times = []
        for i in range(misses + 20):
            request = SynthesisRequest(f"variant{i} {TEXT}", params=params)
            started = time.perf_counter()
            assert cached.synthesize(request).cache == "miss"
            if i >= 20:
                times.append(time.perf_counter() - started)
        cache.close()
    return statistics.median(times)


def main(trees: list[str]) -> None:
    """Interleave ``ROUNDS`` rounds over ``trees``; print each tree's median of medians."""
    medians: dict[str, list[float]] = {tree: [] for tree in trees}
    for _ in range(ROUNDS):
        for tree in trees:
            out = subprocess.run(
                [sys.executable, "-c", f"from bench.probes.miss_trees import one_tree; "
                 f"print(one_tree({MISSES}))"],
                env={"PYTHONPATH": f"{tree}/src:.", "PATH": "/usr/bin:/bin"},
                capture_output=True, text=True, check=True)
            medians[tree].append(float(out.stdout.split()[-1]))
    for tree, values in medians.items():
        print(f"{tree}: {statistics.median(values) * 1e3:.3f} ms per miss "
              f"(rounds: {', '.join(f'{v * 1e3:.3f}' for v in values)})")


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
