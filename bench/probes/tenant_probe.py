"""Another tenant's key costs what an absent key costs: 404 timings side by side.

Runs a real ``voxcache serve`` app on uvicorn with two tenants, stores takes for
tenant A (some in memory, some on disk only), and times tenant B's probes of
A's keys against probes of keys that exist nowhere, interleaved so that any
drift of the machine hits both alike. Before the hardening the foreign key was
read and verified first (1-2 ms against 0.4-0.6 ms): the difference told B
which keys A had.

    python -m bench.probes.tenant_probe [--probes 2000]
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from voxcache.testing.servers import serve_in_thread

KEYS = {"key-of-tenant-a": "acme", "key-of-tenant-b": "globex"}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(probes: int = 2000) -> dict[str, object]:
    """Time B's 404s for A's keys (memory, disk) and for absent keys; return the figures."""
    from voxcache.cache import Cache
    from voxcache.cached import CachedEngine
    from voxcache.config import Settings
    from voxcache.engines.tone import ToneEngine
    from voxcache.service import create_app
    from voxcache.service.options import ServiceOptions

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(cache_dir=Path(folder) / "cache", engine="tone")
        cached = CachedEngine(ToneEngine(), Cache(settings.cache_dir))
        app = create_app(settings, options=ServiceOptions(api_keys=KEYS), cached=cached)
        with serve_in_thread(app) as url, httpx.Client(base_url=url) as client:
            a = {"Authorization": "Bearer key-of-tenant-a"}
            b = {"Authorization": "Bearer key-of-tenant-b"}
            keys = [client.post("/v1/audio/speech", headers=a, json={
                "input": f"Acme notice number {i}.", "response_format": "wav"}
            ).headers["x-cache-key"] for i in range(40)]
            for key in keys[20:]:
                cached.cache.in_process.delete(key)  # half of them on disk only
            kinds = {"foreign, in memory": keys[:20], "foreign, on disk": keys[20:],
                     "absent": [secrets.token_hex(32) for _ in range(40)]}
            times: dict[str, list[float]] = {name: [] for name in kinds}
            for i in range(probes):
                for name, pool in kinds.items():
                    started = time.perf_counter()
                    answer = client.get(f"/v1/audio/{pool[i % len(pool)]}", headers=b)
                    times[name].append((time.perf_counter() - started) * 1000)
                    assert answer.status_code == 404, answer.text
            owner = []
            for i in range(probes):
                started = time.perf_counter()
                client.get(f"/v1/audio/{keys[i % 20]}", headers=a).raise_for_status()
                owner.append((time.perf_counter() - started) * 1000)
        cached.cache.close()
    absent = statistics.median(times["absent"])
    result = {name: {"median_ms": round(statistics.median(v), 4),
                     "p99_ms": round(_percentile(v, 0.99), 4),
                     "median_vs_absent": round(statistics.median(v) / absent, 3)}
              for name, v in times.items()}
    result["owner's own hit (for scale)"] = {
        "median_ms": round(statistics.median(owner), 4), "p99_ms": round(
            _percentile(owner, 0.99), 4), "median_vs_absent": None}
    return {"probes_each": probes, "results": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=2000)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    logging.getLogger("voxcache.access").setLevel(logging.WARNING)
    figures = run(args.probes)
    from rich.console import Console
    from rich.table import Table

    table = Table("probe by tenant B", "median ms", "p99 ms", "median ÷ absent",
                  title=f"404 timings, {figures['probes_each']} probes each, interleaved")
    for name, row in figures["results"].items():  # type: ignore[union-attr]
        ratio = row["median_vs_absent"]
        table.add_row(name, f"{row['median_ms']:.3f}", f"{row['p99_ms']:.3f}",
                      "" if ratio is None else f"{ratio:.3f}")
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
