"""Several nodes, one cache: the cross-node stampede, waiters' wake delay, three nodes' hits.

``python -m bench.suite.cluster`` (or ``--quick``), or ``voxcache bench --only cluster``. It starts
a redis-server and moto's S3 server on free ports and three ``voxcache serve`` nodes (tone
engine, each with its own cache folder) sharing them, as docs/operating/cluster.md describes.

- **Stampede across nodes** at N = 8, 64, 256 callers of one new key, spread evenly over
  the three nodes at once: the renders the fleet made (each node's persisted
  ``syntheses``), and the waiters' wake delay — measured by each waiting node (from the
  leader announcing ``landed`` on the bus to its lease wait returning: the counters
  ``lease_wake_us`` and ``lease_wakeups``), and at the client, from the ``landed`` entry
  (a Redis stream id is the server's clock in ms) to each waiting node's first JOINED
  answer and to the last answer of all. Goals (issue 11): one render at every N; woken
  within 50 ms.
- **Purge reach**: from a ``DELETE`` answered on one node to the other two answering 404.
- **Hits per second, three nodes against one**: wrk POSTing one stored phrase (a memory
  hit everywhere), all connections on one node, then split over three. Everything shares
  the machine's two cores, so three nodes can only show what the cores allow.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from voxcache.testing.servers import MotoS3Server, RedisServer, clean_env, free_port

from ..helpers.core import Context, ratio
from .remote_tiers import missing_parts

NAME = "cluster"
TITLE = "Several nodes: cross-node stampede, wake delay, hits/s of three nodes against one"
STAMPEDE_N = (8, 64, 256)
RENDER_DELAY = 0.3
"""Seconds the tone engine spends per render: long enough for every caller to arrive."""
HIT_TEXT = "Thank you for calling. All of our agents are busy right now, please hold."
PREFIX = "bench:"


@contextlib.contextmanager
def three_nodes(work: Path, tiers: list[str], env: dict[str, str]) -> Iterator[list[str]]:
    """Three ``voxcache serve`` nodes (tone engine, own folders); their base URLs."""
    config = work / "voxcache.toml"
    config.write_text("tiers = [" + ", ".join(f'"{t}"' for t in tiers) + "]\n")
    clean = clean_env()
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for name in "abc":
            port = free_port()
            with open(work / f"node-{name}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "voxcache", "--cache-dir", str(work / name),
                     "--engine", "tone", "--config", str(config), "serve", "--port", str(port),
                     "--no-access-log"], env={**clean, **env}, stdout=log,
                    stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(urls, procs, strict=True):
            _wait(url, proc)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"a node exited at start (code {proc.returncode})")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"{url}/readyz", timeout=2).close()
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become ready")


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def counters(url: str) -> dict[str, int]:
    """A node's persisted counters."""
    return {name: int(value) for name, value in _json(f"{url}/v1/stats")["counters"].items()}


def syntheses(url: str) -> int:
    return counters(url).get("syntheses", 0)


Answer = tuple[str, float, str, int, str]
"""(node, answered at, X-Cache, status, X-Cache-Key) of one caller."""


async def _callers(urls: list[str], n: int, text: str) -> list[Answer]:
    """N callers of one new key, spread over the nodes, all at once."""
    import httpx

    body = {"input": text, "response_format": "wav", "params": {"delay": RENDER_DELAY}}
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def one(url: str) -> Answer:
            got = await client.post(f"{url}/v1/audio/speech", json=body)
            return (url, time.time(), got.headers.get("x-cache", ""), got.status_code,
                    got.headers.get("x-cache-key", ""))

        return await asyncio.gather(*(one(urls[i % len(urls)]) for i in range(n)))


def landed_at(redis: Any, key: str) -> float | None:
    """When the first ``landed`` entry for ``key`` was added (the stream id's ms)."""
    for entry_id, fields in redis.xrange(f"{PREFIX}{{bus}}:landed", "-", "+"):
        if fields.get(b"s") == key.encode() and fields.get(b"r") == b"landed":
            return int(entry_id.split(b"-")[0]) / 1000
    return None


def stampede(ctx: Context, urls: list[str], redis: Any) -> list[dict[str, Any]]:
    """One new key per N: renders, and how soon the nodes that waited were woken."""
    rows = []
    for n in ctx.pick(STAMPEDE_N[:2], STAMPEDE_N):
        text = f"Stampede of {n} callers at {time.time_ns()}."
        before = {url: counters(url) for url in urls}
        answers = asyncio.run(_callers(urls, n, text))
        after = {url: counters(url) for url in urls}

        def delta(url: str, name: str, before: dict[str, dict[str, int]] = before,
                  after: dict[str, dict[str, int]] = after) -> int:
            return after[url].get(name, 0) - before[url].get(name, 0)

        renders = {url: delta(url, "syntheses") for url in urls}
        woken = [(delta(url, "lease_wake_us") / delta(url, "lease_wakeups")) / 1e3
                 for url in urls if delta(url, "lease_wakeups")]
        landed = landed_at(redis, answers[0][4])
        leader = max(renders, key=lambda url: renders[url])
        joined = [(url, at) for url, at, cache, *_ in answers
                  if url != leader and cache == "JOINED"]
        first = [min(at for u, at in joined if u == url) for url in urls
                 if url != leader and any(u == url for u, _ in joined)]
        delays = [(at - landed) * 1e3 for at in first] if landed else []
        last = max((at for _, at, *_ in answers), default=0.0)
        rows.append({
            "callers": n, "renders (fleet)": sum(renders.values()),
            "MISS answers": sum(1 for a in answers if a[2] == "MISS"),
            "non-200": sum(1 for a in answers if a[3] != 200),
            "nodes woken": len(woken),
            "wake ms (node, max)": max(woken) if woken else float("nan"),
            "first JOINED answer ms (max)": max(delays) if delays else float("nan"),
            "last answer ms": (last - landed) * 1e3 if landed else float("nan"),
        })
        row = rows[-1]
        print(f"  N={n:>3}: renders {row['renders (fleet)']}, MISS {row['MISS answers']}, "
              f"{row['nodes woken']} nodes woken after {row['wake ms (node, max)']:.2f} ms "
              f"(max); first JOINED answer {row['first JOINED answer ms (max)']:.1f} ms, "
              f"last answer {row['last answer ms']:.0f} ms after landing", flush=True)
    return rows


def purge_reach(ctx: Context, urls: list[str]) -> list[dict[str, Any]]:
    """From a purge answered on one node to the others answering 404 for the take (they held
    it in memory), polled back to back."""
    import httpx

    reach: list[float] = []
    with httpx.Client(timeout=30) as client:
        for n in range(ctx.pick(3, 10)):
            text = f"Purge reach {n} {time.time_ns()}."
            key = client.post(f"{urls[0]}/v1/audio/speech",
                              json={"input": text, "response_format": "wav"}
                              ).headers["x-cache-key"]
            time.sleep(0.05)  # the take lands in Redis
            for url in urls[1:]:
                client.post(f"{url}/v1/audio/speech", json={"input": text,
                                                             "response_format": "wav"})
            assert client.delete(f"{urls[0]}/v1/entries/{key}").status_code == 204
            answered = time.perf_counter()
            for url in urls[1:]:
                while client.get(f"{url}/v1/audio/{key}").status_code != 404:
                    pass
                reach.append((time.perf_counter() - answered) * 1e3)
    row = {"purges": len(reach) // 2, "median ms": statistics.median(reach),
           "max ms": max(reach)}
    print(f"  purge reach: median {row['median ms']:.1f} ms, max {row['max ms']:.1f} ms",
          flush=True)
    return [row]


def wrk(url: str, connections: int, seconds: float, script: Path) -> float:
    """requests/s of one wrk run (keep-alive)."""
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s",
                          "--timeout", "10s", "-s", str(script), f"{url}/v1/audio/speech"],
                         capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    raise RuntimeError(f"could not read wrk's output:\n{out}")


def hits_per_second(ctx: Context, urls: list[str], work: Path) -> list[dict[str, Any]]:
    """One node against three, the same total connections, a memory hit everywhere."""
    body = json.dumps({"input": HIT_TEXT, "response_format": "wav"})
    script = work / "post.lua"
    script.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
                      'wrk.headers["Content-Type"] = "application/json"\n')
    for url in urls:  # rendered once on the first node, a Redis hit then a memory hit elsewhere
        for _ in range(2):
            urllib.request.urlopen(urllib.request.Request(
                f"{url}/v1/audio/speech", data=body.encode(),
                headers={"Content-Type": "application/json"}), timeout=60).read()
    seconds = ctx.pick(1, 10)  # quick: CI's smoke, as bench.http's (a full run's figures)
    rows = []
    for connections in ctx.pick((24,), (6, 24, 60)):
        one = wrk(urls[0], connections, seconds, script)
        with ThreadPoolExecutor(3) as pool:
            three = sum(pool.map(lambda url, c=connections: wrk(url, c // 3, seconds, script),
                                 urls))
        rows.append({"connections": connections, "one node req/s": one,
                     "three nodes req/s": three, "× one node": ratio(three, one)})
        print(f"  {connections:>3} connections: one node {one:8.0f} req/s, three nodes "
              f"{three:8.0f} req/s (× {ratio(three, one):.2f})", flush=True)
    return rows


def run(ctx: Context) -> None:
    """Start the servers and the nodes; measure; record the tables."""
    missing = missing_parts()
    if missing is not None:
        ctx.note(missing)
        return
    import redis

    work = ctx.scratch("nodes")
    with RedisServer(work) as redis_server, MotoS3Server() as s3:
        s3.create_bucket("bench-cluster")
        tiers = ["memory", "disk", f"{redis_server.url}?prefix={PREFIX}",
                 "s3://bench-cluster/nodes"]
        with three_nodes(work, tiers, s3.env) as urls:
            client = redis.Redis.from_url(redis_server.url)
            rows = stampede(ctx, urls, client)
            ctx.table("stampede", "Cross-node stampede: N callers of one new key over three "
                      "nodes", rows, notes=[
                          f"Tone engine, {RENDER_DELAY} s per render; callers spread evenly "
                          "over the nodes, all sent at once.",
                          "Wake: measured by each waiting node (its `lease_wake_us` ÷ "
                          "`lease_wakeups` counters): from the leader announcing `landed` "
                          "(its clock) to the waiter's lease wait returning. The answers: at "
                          "the client, from the `landed` entry (Redis stream id, ms): the "
                          "first JOINED answer of each waiting node adds reading the take "
                          "from Redis and the HTTP answer; the last answer of any caller "
                          "adds every other caller's answer on the same 2 cores.",
                          "Goals: one render at every N, waiters woken within 50 ms."])
            ctx.table("purge", "A purge on one node: until the two others answer 404",
                      purge_reach(ctx, urls), notes=[
                          "From the DELETE's answer on node A; B and C held the take in "
                          "memory and are polled back to back (each poll is a request)."])
            if shutil.which("wrk") is None:
                ctx.note("wrk is not installed (Debian: apt-get install wrk); hits/s skipped")
                return
            hits = hits_per_second(ctx, urls, work)
            ctx.table("hits", "Hits per second: three nodes against one (POST, memory hits, "
                      "wrk)", hits, notes=["All three nodes, Redis, moto and wrk share the "
                                           "machine's 2 cores."])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.suite.cluster", description=TITLE)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="voxcache-bench-") as work:
        ctx = Context(quick=args.quick, out=Path(work), work=Path(work), current=NAME)
        run(ctx)


if __name__ == "__main__":
    main()
