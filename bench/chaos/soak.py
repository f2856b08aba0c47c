"""``python -m bench.chaos.soak --minutes 30 --nodes 3``: mixed traffic for a long time, watched.

Real ``voxcache serve`` processes (one node, or three sharing a real redis-server and moto's
S3 server) take a steady mix for ``--minutes``: hits of a warm set of phrases, misses of new
phrases at a rate that keeps every render slot busy (the tone engine with simulated model
time), purges of stored takes, and — half-way through — a Redis restart. Every ten seconds
each server process is sampled: resident memory, open file descriptors and threads (from
``/proc``), and the hit latencies of the window (p50, p99). Errors are counted (any 5xx, any
failed request). The report gives each series' least-squares slope per hour, so "flat" is a
number, and draws the plots. A soak is a benchmark, not a test: CI runs a one-minute smoke.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from voxcache.testing.servers import MotoS3Server, RedisServer, clean_env, free_port

SAMPLE_SECONDS = 10.0
HOT_PHRASES = 200
RENDER_DELAY = 0.2
"""Simulated model seconds per sentence (the tone engine's ``delay``)."""
RENDER_SLOTS = 2
MEMORY_BUDGET = "64MiB"
"""The memory tier's budget per kind: the misses fill it within minutes, after which a
process's memory must stay flat (with the default 256 MiB it takes about 15 minutes)."""


@dataclass
class Node:
    """One ``voxcache serve`` process and its samples."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    samples: list[dict[str, float]] = field(default_factory=list)


def proc_figures(pid: int) -> dict[str, float]:
    """Resident memory (MB; also split into anonymous memory, the heap, and file pages mapped
    in, such as LMDB's and SQLite's, which the kernel can drop), open descriptors and threads
    of a process, from /proc."""
    wanted = ("VmRSS", "RssAnon", "RssFile", "Threads")
    fields = {line.split(":")[0]: line.split()[1]
              for line in Path(f"/proc/{pid}/status").read_text().splitlines()
              if line.startswith(wanted)}
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {"rss_mb": int(fields["VmRSS"]) / 1024,
            "anon_mb": int(fields.get("RssAnon", 0)) / 1024,
            "file_mb": int(fields.get("RssFile", 0)) / 1024,
            "fds": fds, "threads": int(fields["Threads"])}


async def memory_tier_mb(client: httpx.AsyncClient, node: Node) -> float | None:
    """The bytes the node's memory tier holds (MB, from ``/metrics``): the heap fills with
    it, and a Redis restart empties it (the bus clears it), so the heap is read against it."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        for line in (await client.get(f"{node.url}/metrics")).text.splitlines():
            if line.startswith('voxcache_stored_bytes{tier="memory"}'):
                return round(float(line.split()[-1]) / 2**20, 1)
    return None


def slope_per_hour(times: list[float], values: list[float]) -> float:
    """Least-squares slope of ``values`` against ``times`` (seconds), per hour."""
    if len(times) < 2:
        return 0.0
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    var = sum((t - mean_t) ** 2 for t in times)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)
               ) / var * 3600


@contextlib.contextmanager
def shared_servers(work: Path, nodes: int) -> Iterator[tuple[RedisServer, MotoS3Server | None]]:
    redis = RedisServer(work / "redis")
    s3 = MotoS3Server() if nodes > 1 else None
    redis.start()
    if s3 is not None:
        s3.start()
    try:
        yield redis, s3
    finally:
        redis.kill()
        if s3 is not None:
            s3.kill()


@contextlib.contextmanager
def serve_nodes(work: Path, count: int, tiers: list[str], env: dict[str, str]
                ) -> Iterator[list[Node]]:
    config = work / "voxcache.toml"
    config.write_text(f"tiers = {json.dumps(tiers)}\nmemory_budget = \"{MEMORY_BUDGET}\"\n"
                      f"[service]\nrender_concurrency = "
                      f"{RENDER_SLOTS}\nrender_queue = 8\naccess_log = false\n")
    clean = clean_env()
    started: list[Node] = []
    try:
        for index in range(count):
            port = free_port()
            log = (work / f"node-{index}.log").open("wb")
            process = subprocess.Popen(
                [sys.executable, "-m", "voxcache", "--cache-dir", str(work / f"node-{index}"),
                 "--engine", "tone", "--config", str(config), "serve", "--port", str(port)],
                env={**clean, **env}, stdout=log, stderr=subprocess.STDOUT)
            started.append(Node(f"node-{index}", f"http://127.0.0.1:{port}", process))
        for node in started:
            deadline = time.monotonic() + 90
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{node.url}/readyz", timeout=2).status_code == 200:
                        break
                if node.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{node.name} did not start (see {work})")
                time.sleep(0.1)
        yield started
    finally:
        for node in started:
            node.process.terminate()
        for node in started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(30)


class Traffic:
    """The mix: hits of the warm set, misses of new phrases, purges; latencies and errors."""

    def __init__(self, nodes: list[Node], seed: int = 1) -> None:
        self.nodes = nodes
        self.random = random.Random(seed)
        self.hot = [f"Hot phrase number {n}: please mind the gap." for n in range(HOT_PHRASES)]
        self.hit_seconds: list[float] = []
        self.counts = {"hits": 0, "misses": 0, "purges": 0, "refused_503": 0, "errors": 0}
        self.keys: list[tuple[Node, str]] = []
        self.failures: list[dict[str, Any]] = []
        """What each error was: when, which node and request, the status or exception."""
        self.started = time.monotonic()
        self.stop = False

    def failed(self, node: Node, what: str, detail: str) -> None:
        """Count an error and keep what it was (the first 200 of them)."""
        self.counts["errors"] += 1
        if len(self.failures) < 200:
            self.failures.append({"t": round(time.monotonic() - self.started, 1),
                                  "node": node.name, "request": what, "detail": detail[:300]})

    async def warm(self, client: httpx.AsyncClient) -> None:
        for node in self.nodes:
            for text in self.hot:
                answer = await client.post(f"{node.url}/v1/audio/speech", json={
                    "input": text, "response_format": "wav"})
                answer.raise_for_status()

    async def hitter(self, client: httpx.AsyncClient) -> None:
        while not self.stop:
            node = self.random.choice(self.nodes)
            started = time.perf_counter()
            try:
                answer = await client.post(f"{node.url}/v1/audio/speech", json={
                    "input": self.random.choice(self.hot), "response_format": "wav"})
            except httpx.HTTPError as exc:
                self.failed(node, "hit", f"{type(exc).__name__}: {exc}")
                continue
            if answer.status_code != 200:
                self.failed(node, "hit", f"{answer.status_code}: {answer.text}")
                continue
            if answer.headers.get("x-cache") == "HIT":
                self.hit_seconds.append(time.perf_counter() - started)
                self.counts["hits"] += 1

    async def misser(self, client: httpx.AsyncClient) -> None:
        while not self.stop:
            node = self.random.choice(self.nodes)
            text = f"A new phrase {uuid.uuid4().hex[:12]} for the soak. And its second part."
            try:
                answer = await client.post(f"{node.url}/v1/audio/speech", json={
                    "input": text, "response_format": "wav", "params": {"delay": RENDER_DELAY}})
            except httpx.HTTPError as exc:
                self.failed(node, "miss", f"{type(exc).__name__}: {exc}")
                continue
            if answer.status_code == 503:  # admission control said no: expected when saturated
                self.counts["refused_503"] += 1
                await asyncio.sleep(0.2)
            elif answer.status_code != 200:
                self.failed(node, "miss", f"{answer.status_code}: {answer.text}")
            else:
                self.counts["misses"] += 1
                self.keys.append((node, answer.headers["x-cache-key"]))

    async def purger(self, client: httpx.AsyncClient) -> None:
        while not self.stop:
            await asyncio.sleep(1.0)
            if not self.keys:
                continue
            node, key = self.keys.pop(self.random.randrange(len(self.keys)))
            try:
                answer = await client.delete(f"{node.url}/v1/entries/{key}")
            except httpx.HTTPError as exc:
                self.failed(node, "purge", f"{type(exc).__name__}: {exc}")
                continue
            if answer.status_code in (204, 404):
                self.counts["purges"] += 1
            else:
                self.failed(node, "purge", f"{answer.status_code}: {answer.text}")


async def run(nodes: list[Node], minutes: float, redis: RedisServer) -> dict[str, Any]:
    traffic = Traffic(nodes)
    # idle connections expire here before the server's 5 s keep-alive closes them: a request
    # sent on a connection at the instant the server closes it is lost (httpx.ReadError)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64,
                          keepalive_expiry=2.0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await traffic.warm(client)
        traffic.started = time.monotonic()
        workers = [asyncio.create_task(traffic.hitter(client)) for _ in range(8)]
        workers += [asyncio.create_task(traffic.misser(client)) for _ in range(RENDER_SLOTS * 2)]
        workers.append(asyncio.create_task(traffic.purger(client)))
        started = time.monotonic()
        end = started + minutes * 60
        restarted = False
        windows: list[dict[str, Any]] = []
        while time.monotonic() < end:
            await asyncio.sleep(min(SAMPLE_SECONDS, max(0.0, end - time.monotonic())))
            now = time.monotonic() - started
            latencies, traffic.hit_seconds = traffic.hit_seconds, []
            window: dict[str, Any] = {"t": round(now, 1), "hits": len(latencies),
                                      "p50_ms": _ms(latencies, 0.5), "p99_ms": _ms(latencies, 0.99),
                                      "errors": traffic.counts["errors"],
                                      "load": round(os.getloadavg()[0], 2)}
            for node in nodes:
                window[node.name] = proc_figures(node.process.pid)
                window[node.name]["tier_mb"] = await memory_tier_mb(client, node)
            windows.append(window)
            if not restarted and now >= minutes * 30:
                redis.kill()  # half-way: Redis restarts, empty
                await asyncio.sleep(1.0)
                redis.start()
                restarted = True
                window["redis_restart"] = True
        traffic.stop = True
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return {"windows": windows, "counts": traffic.counts, "failures": traffic.failures}


def _ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def summarize(result: dict[str, Any], nodes: list[Node]) -> dict[str, Any]:
    """Slopes per hour of every series, after the first window (start-up and warm-up)."""
    windows = result["windows"][1:] or result["windows"]
    times = [w["t"] for w in windows]
    summary: dict[str, Any] = {"counts": result["counts"], "nodes": {},
                               "failures": result["failures"][:10]}
    p99 = [(w["t"], w["p99_ms"]) for w in windows if w["p99_ms"] is not None]
    summary["hit_p99_ms"] = {"first": p99[0][1] if p99 else None,
                             "last": p99[-1][1] if p99 else None,
                             "slope_per_hour": round(slope_per_hour(
                                 [t for t, _ in p99], [v for _, v in p99]), 3)}
    for node in nodes:
        series = {name: [w[node.name][name] for w in windows]
                  for name in ("rss_mb", "anon_mb", "file_mb", "fds", "threads")}
        if all(w[node.name].get("tier_mb") is not None for w in windows):
            series["tier_mb"] = [w[node.name]["tier_mb"] for w in windows]
            series["anon_minus_tier_mb"] = [a - t for a, t in zip(
                series["anon_mb"], series["tier_mb"], strict=True)]
        summary["nodes"][node.name] = {
            name: {"first": values[0], "last": values[-1], "max": max(values),
                   "slope_per_hour": round(slope_per_hour(times, values), 3),
                   "slope_second_half": round(slope_per_hour(
                       times[len(times) // 2:], values[len(values) // 2:]), 3)}
            for name, values in series.items()}
    return summary


def plot(result: dict[str, Any], nodes: list[Node], out: Path, label: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = result["windows"]
    times = [w["t"] / 60 for w in windows]
    paths = []
    for name, unit in (("rss_mb", "MB"), ("fds", "descriptors"), ("threads", "threads")):
        fig, ax = plt.subplots(figsize=(7, 3))
        for node in nodes:
            line, = ax.plot(times, [w[node.name][name] for w in windows], label=node.name)
            if name == "rss_mb" and "anon_mb" in windows[0][node.name]:
                ax.plot(times, [w[node.name]["anon_mb"] for w in windows], linestyle=":",
                        color=line.get_color(), label=f"{node.name} anonymous (heap)")
            if name == "rss_mb" and windows[0][node.name].get("tier_mb") is not None:
                ax.plot(times, [w[node.name]["tier_mb"] or 0 for w in windows],
                        linestyle="--", color=line.get_color(),
                        label=f"{node.name} memory tier")
        _mark_restart(ax, windows)
        ax.set_xlabel("minutes")
        ax.set_ylabel(unit)
        ax.set_title(f"soak, {label}: {name} per process")
        ax.legend()
        fig.tight_layout()
        path = out / f"soak-{label}-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(times, [w["p99_ms"] for w in windows], label="hit p99")
    ax.plot(times, [w["p50_ms"] for w in windows], label="hit p50")
    _mark_restart(ax, windows)
    ax.set_xlabel("minutes")
    ax.set_ylabel("ms")
    if "load" in windows[0]:  # the host's load: on a shared host it moves the tail most
        load_ax = ax.twinx()
        load_ax.plot(times, [w["load"] for w in windows], color="grey", linewidth=0.8)
        load_ax.set_ylabel("host load (1 min)", color="grey")
    ax.set_title(f"soak, {label}: hit latency per 10 s window")
    ax.legend()
    fig.tight_layout()
    path = out / f"soak-{label}-latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [*paths, path]


def _mark_restart(ax: Any, windows: list[dict[str, Any]]) -> None:
    for w in windows:
        if w.get("redis_restart"):
            ax.axvline(w["t"] / 60, color="grey", linestyle="--", linewidth=1)


def soak(minutes: float, count: int, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vx-soak-"))
    with shared_servers(work, count) as (redis, s3):
        env: dict[str, str] = {}
        tiers = ["memory", "disk", redis.url]
        if s3 is not None:
            bucket = f"soak-{uuid.uuid4().hex[:8]}"
            s3.create_bucket(bucket)
            tiers.append(f"s3://{bucket}/p")
            env = dict(s3.env)
        with serve_nodes(work, count, tiers, env) as nodes:
            result = asyncio.run(run(nodes, minutes, redis))
            label = f"{count}-node" + ("s" if count > 1 else "")
            summary = summarize(result, nodes)
            summary["plots"] = [str(p) for p in plot(result, nodes, out, label)]
    summary.update({"minutes": minutes, "nodes_count": count, "render_slots": RENDER_SLOTS,
                    "render_delay": RENDER_DELAY, "memory_budget": MEMORY_BUDGET})
    (out / f"soak-{count}.json").write_text(json.dumps({"summary": summary, **result},
                                                       indent=1))
    for log in work.glob("node-*.log"):  # the servers' own words, then the folder (GBs) goes
        shutil.copy2(log, out / f"soak-{count}-{log.name}")
    shutil.rmtree(work, ignore_errors=True)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 3))
    parser.add_argument("--out", type=Path, default=Path("bench-results/soak"))
    args = parser.parse_args()
    summary = soak(args.minutes, args.nodes, args.out)
    print(json.dumps(summary, indent=1))
    if summary["counts"]["errors"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
