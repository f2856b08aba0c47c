"""A second process using the same cache folder: extracts (slowly) or reads one artifact.

    python stage_worker.py CACHE_DIR CLIP MARKER_DIR [embed]

Default: a slow stand-in extractor (0.5 s) that leaves a marker file each time it
really runs, so the parent can count extractions across processes. ``embed``: the
real resemblyzer encoder. Prints the result's cache/tier and the key.
``STAGE_TIERS`` (a tier list) makes it a node of several; ``STAGE_START_AT`` (a
``time.time()``) makes every worker ask at that instant.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from voxcache.cache import Cache, CacheConfig
from voxcache.stages import Clip, StageCache, stage_cached


def main() -> None:
    root, clip_path, markers = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    real = len(sys.argv) > 4 and sys.argv[4] == "embed"
    tiers = os.environ.get("STAGE_TIERS")
    cache = Cache(root, CacheConfig(tiers=tuple(tiers.split(","))) if tiers else None)
    stages = StageCache(cache, lock_wait=60)
    start_at = float(os.environ.get("STAGE_START_AT", "0"))
    time.sleep(max(0.0, start_at - time.time()))
    if real:
        from voxcache.stages.embeddings import SpeakerEmbeddings

        embeddings = SpeakerEmbeddings(stages)
        result = embeddings.of(clip_path.read_bytes(), tenant="acme")
    else:
        @stage_cached(stages, kind="embedding", extractor="slow-standin", revision="1")
        def slow(clip: Clip) -> np.ndarray:
            (markers / f"ran-{os.getpid()}").write_text("1")
            time.sleep(0.5)
            return clip.mono()[:256]

        result = slow(clip_path.read_bytes(), tenant="acme")
    print(json.dumps({"cache": result.cache, "tier": result.tier, "key": result.key}))
    cache.close()


if __name__ == "__main__":
    main()
