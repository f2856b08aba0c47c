"""Packs and edges, measured side by side in one run: ``python -m bench.probes.packs [--quick]``.

1. Export and import throughput of ``voxcache pack`` (entries/s, MB/s) beside a plain
   ``tar`` of the same entry files: ``tar cf`` of ``objects/`` and ``tar xf`` into an empty
   folder. The pack does more — it verifies every entry (full envelope check) and hashes
   it with BLAKE3 on export (read twice: the signed manifest comes first), and on import
   checks the signature, each entry's BLAKE3 and envelope, and publishes each entry
   atomically with an index row — so the gap is what that safety costs.
2. An edge hit beside the center's hit over loopback: the same stored phrase asked of a
   ``voxcache serve`` center and of a ``voxcache serve --upstream voxcache=…`` edge
   (``POST /v1/synthesize``, keep-alive, one client), and what an edge miss costs when
   the center has the take (fetched by key) or must render it (tone engine: ~0 s).

Entries are Piper-sized takes (3 s of 22.05 kHz mono, ~132 KB) of random samples.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from voxcache import Audio, Cache
from voxcache.entry import audio_entry
from voxcache.packs import Selection, export_pack, import_pack
from voxcache.packs.signing import generate, load_public_key, load_signing_key
from voxcache.testing.servers import clean_env

from ..helpers.core import Stats

TAKE_SECONDS = 3.0
RATE = 22050


def fill(root: Path, count: int) -> int:
    """``count`` stored takes in a fresh cache folder; returns their total bytes."""
    cache = Cache(root)
    rng = np.random.default_rng(7)
    total = 0
    for i in range(count):
        pcm = rng.integers(-8000, 8000, int(TAKE_SECONDS * RATE), dtype="<i2").tobytes()
        entry = audio_entry(f"{i:064x}", Audio(pcm, RATE, 1),
                            meta={"tenant": "default", "voice": "joe", "text": f"take {i}"})
        cache.put(entry)
        total += entry.size
    cache.close()
    return total


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def throughput(count: int, size: int, seconds: float, what: str) -> dict[str, Any]:
    return {"what": what, "seconds": round(seconds, 3),
            "entries_per_s": round(count / seconds), "MB_per_s": round(size / seconds / 1e6, 1)}


def packs(workdir: Path, count: int) -> list[dict[str, Any]]:
    """Export/import of ``count`` takes, beside tar of the same files."""
    source, pack = workdir / "source", workdir / "bench.vxpack"
    size = fill(source, count)
    generate(workdir / "key")
    key, pub = load_signing_key(workdir / "key"), load_public_key(workdir / "key.pub")
    rows = []
    cache = Cache(source)
    try:
        seconds, _ = timed(lambda: _export(cache, pack, key))
    finally:
        cache.close()
    rows.append(throughput(count, size, seconds, "pack export (verify, BLAKE3, sign, write)"))
    tarball = workdir / "plain.tar"
    seconds, _ = timed(lambda: subprocess.run(["tar", "cf", str(tarball), "-C", str(source),
                                               "objects"], check=True))
    rows.append(throughput(count, size, seconds, "tar cf objects/ (no checks)"))
    target = workdir / "target"
    cache = Cache(target)
    try:
        seconds, report = timed(lambda: _import(cache, pack, pub))
    finally:
        cache.close()
    assert report.complete and len(report.imported) == count
    rows.append(throughput(count, size, seconds, "pack import (signature, BLAKE3, envelope, "
                                                 "atomic publish, index)"))
    untarred = workdir / "untarred"
    untarred.mkdir()
    seconds, _ = timed(lambda: subprocess.run(["tar", "xf", str(tarball), "-C", str(untarred)],
                                              check=True))
    rows.append(throughput(count, size, seconds, "tar xf (no checks)"))
    return rows


def _export(cache: Cache, pack: Path, key: Any) -> None:
    with open(pack, "wb") as out:
        export_pack(cache, out, Selection(), key)


def _import(cache: Cache, pack: Path, pub: Any) -> Any:
    with open(pack, "rb") as stream:
        return import_pack(cache, stream, [pub])


@contextlib.contextmanager
def serving(cache_dir: Path, *args: str) -> Iterator[str]:
    """``voxcache serve`` (tone engine, no access log) on a free port."""
    from voxcache.testing.servers import free_port

    port = free_port()
    env = clean_env()
    proc = subprocess.Popen([sys.executable, "-m", "voxcache.cli", "--cache-dir",
                             str(cache_dir), "--engine", "tone", "serve", "--port", str(port),
                             "--no-access-log", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("voxcache serve did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def hits(workdir: Path, repeats: int) -> list[dict[str, Any]]:
    """The same stored phrase from the center and from its edge; edge misses."""
    phrase = {"text": "Your order is ready at counter four.", "response_format": "wav"}
    rows = []
    with serving(workdir / "center") as center, \
            serving(workdir / "edge", "--upstream", f"voxcache={center}") as edge, \
            httpx.Client(timeout=30) as client:
        client.post(center + "/v1/synthesize", json=phrase)
        for name, url in (("center hit (loopback)", center), ("edge hit (loopback)", edge)):
            samples = []
            for i in range(repeats + 20):
                started = time.perf_counter()
                answer = client.post(url + "/v1/synthesize", json=phrase)
                if i >= 20:
                    samples.append(time.perf_counter() - started)
                assert answer.headers["x-cache"] in ("HIT", "MISS"), answer.text
            rows.append({"what": name, **_ms(Stats.of(samples))})
        for name, render_first in (("edge miss, fetched by key from the center", True),
                                   ("edge miss, rendered at the center", False)):
            samples = []
            for i in range(max(20, repeats // 10)):
                fresh = {**phrase, "text": f"{name} number {i}."}
                if render_first:
                    client.post(center + "/v1/synthesize", json=fresh)
                started = time.perf_counter()
                answer = client.post(edge + "/v1/synthesize", json=fresh)
                samples.append(time.perf_counter() - started)
                assert answer.headers["x-cache"] == "MISS", answer.text
            rows.append({"what": name, **_ms(Stats.of(samples))})
    return rows


def _ms(stats: Stats) -> dict[str, Any]:
    return {"median_ms": round(stats.median * 1e3, 2), "p99_ms": round(stats.p99 * 1e3, 2),
            "n": stats.n}


def markdown(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    out = io.StringIO()
    out.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
    for row in rows:
        out.write("| " + " | ".join(str(row[c]) for c in columns) + " |\n")
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer entries and requests")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    count, repeats = (200, 200) if args.quick else (1000, 1000)
    workdir = Path(tempfile.mkdtemp(prefix="voxcache-bench-packs-"))
    try:
        throughputs = packs(workdir, count)
        latency = hits(workdir, repeats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"## Packs: {count} takes of {TAKE_SECONDS:g} s ({int(TAKE_SECONDS * RATE * 2):,} "
          "bytes of samples each)\n")
    print(markdown(throughputs))
    print(f"## Edge and center over loopback ({repeats} requests after 20 of warm-up)\n")
    print(markdown(latency))
    if args.json:
        Path(args.json).write_text(json.dumps({"count": count, "throughput": throughputs,
                                               "latency": latency}, indent=1))


if __name__ == "__main__":
    main()
