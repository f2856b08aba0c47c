"""A process of the stampede test: N threads ask for one key at a given instant."""

from __future__ import annotations

import json
import sys
import threading
import time

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines import load_engine
from voxcache.request import SynthesisRequest


def main() -> None:
    cache_dir, engine_name, text, start_at, threads = sys.argv[1:6]
    engine = load_engine(engine_name)
    cached = CachedEngine(engine, Cache(cache_dir))
    params = {"delay": 0.3} if engine_name == "tone" else {"noise_scale": 0, "noise_w_scale": 0}
    renders = [0]
    inner = engine.render

    def counting_render(request):  # count renders for any engine, Piper included
        renders[0] += 1
        return inner(request)

    engine.render = counting_render  # type: ignore[method-assign]
    statuses: list[str] = []
    pcm: set[bytes] = set()
    lock = threading.Lock()

    def ask() -> None:
        time.sleep(max(0.0, float(start_at) - time.time()))
        result = cached.synthesize(SynthesisRequest(text, params=params))
        with lock:
            statuses.append(result.cache)
            pcm.add(result.audio.pcm)

    workers = [threading.Thread(target=ask) for _ in range(int(threads))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cached.cache.close()
    print(json.dumps({"renders": renders[0], "statuses": statuses,
                      "digests": sorted(hash(p) for p in pcm), "distinct": len(pcm)}))


if __name__ == "__main__":
    main()
