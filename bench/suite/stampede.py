"""Benchmark 4: a stampede — N concurrent requests for one new key.

Target: one render however many ask, and waiters released as soon as the take exists (before
it is written). Run in one process, with the callers as threads (the library's form) and as
coroutines on one event loop (``CachedEngine.take``: the service's form), and across 4
processes (voxcache's per-key file lock plus a disk re-check); the same against tts-cache
(its sync API from threads, and its native asyncio API), whose coalescing is per event loop
and so per process. Two floors with no cache at all show what waking N threads, or N
coroutines, costs this interpreter on this machine. The engine is the tone engine with a
fixed 0.2 s of model time, so render counts and wake-up delays are not lost in Piper's noise.
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing as mp
import threading
import time
from pathlib import Path
from typing import Any

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.request import ResolvedRequest, SynthesisRequest

from ..helpers import plots
from ..helpers.core import Context, Stats

NAME = "stampede"
TITLE = "4. Stampede: concurrent requests for one new key"

DELAY = 0.2
PROCESSES = 4
COUNTS = (1, 8, 64, 256)


class TimedTone(ToneEngine):
    """The tone engine, noting when each render finished (wall clock: comparable across
    processes)."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[float] = []

    def render(self, request: ResolvedRequest):  # type: ignore[override]
        """Render as usual, then note the time."""
        yield from super().render(request)
        self.finished.append(time.time())


def fire(n: int, start_at: float, call: Any) -> list[tuple[float, bool]]:
    """Run ``call`` on ``n`` threads released together; return (finish time, led) per caller."""
    out: list[tuple[float, bool]] = [(0.0, False)] * n

    def worker(i: int) -> None:
        time.sleep(max(0.0, start_at - time.time()))
        led = call()
        out[i] = (time.time(), led)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def warmed(root: str) -> tuple[TimedTone, Cache, CachedEngine]:
    """An engine behind a cache that has already stored a take, as a serving process has:
    the first write to a fresh folder (its index's first page, its first folders) is not
    what a stampede on a live server waits for."""
    engine = TimedTone()
    cache = Cache(Path(root))
    cached = CachedEngine(engine, cache)
    cached.synthesize(SynthesisRequest("Warm-up take."))
    engine.calls.clear()
    engine.finished.clear()
    return engine, cache, cached


def voxcache_task(root: str, text: str, n: int, start_at: float) -> dict[str, Any]:
    """One process's share of a voxcache stampede."""
    engine, cache, cached = warmed(root)
    request = SynthesisRequest(text, params={"delay": DELAY})
    try:
        done = fire(n, start_at, lambda: cached.synthesize(request).cache == "miss")
    finally:
        cache.close()
    return {"done": done, "renders": len(engine.calls), "finished": engine.finished}


def tts_cache_task(root: str, text: str, n: int, start_at: float) -> dict[str, Any]:
    """One process's share of a tts-cache stampede (threads through its sync API)."""
    from ..helpers.peers import tts_cache_disk

    cache = tts_cache_disk(Path(root))
    cache.get_sync("warm-up")  # its sync API starts a loop thread lazily; a live app has one
    finished: list[float] = []

    async def render() -> bytes:
        await asyncio.sleep(DELAY)  # a vendor call, awaited as tts-cache expects
        finished.append(time.time())
        return b"RIFF" + bytes(64_000)

    try:
        done = fire(n, start_at, lambda: not cache.get_or_generate_sync(
            text, generator_fn=render).hit)
    finally:
        cache.close()
    # tts-cache does not say who rendered; count the first `renders` finishers as leaders.
    done.sort()
    done = [(t, i < len(finished)) for i, (t, _) in enumerate(done)]
    return {"done": done, "renders": len(finished), "finished": finished}


def voxcache_async_task(root: str, text: str, n: int) -> dict[str, Any]:
    """N coroutines on one event loop asking ``CachedEngine.take``: the service's form."""
    engine, cache, cached = warmed(root)
    request = SynthesisRequest(text, params={"delay": DELAY})

    async def one() -> tuple[float, bool]:
        take = await cached.take(request)
        assert take.result is not None
        return time.time(), take.result.cache == "miss"

    try:
        done = asyncio.run(_gather(one, n))
    finally:
        cache.close()
    return {"done": done, "renders": len(engine.calls), "finished": engine.finished}


def tts_cache_async_task(root: str, text: str, n: int) -> dict[str, Any]:
    """N coroutines on one event loop asking tts-cache's native ``get_or_generate``."""
    from ..helpers.peers import tts_cache_disk

    cache = tts_cache_disk(Path(root))
    finished: list[float] = []

    async def render() -> bytes:
        await asyncio.sleep(DELAY)
        finished.append(time.time())
        return b"RIFF" + bytes(64_000)

    async def one() -> tuple[float, bool]:
        result = await cache.get_or_generate(text, generator_fn=render)
        return time.time(), not result.hit

    try:
        done = asyncio.run(_gather(one, n))
    finally:
        cache.close()
    done.sort()  # as in tts_cache_task: the earliest finishers count as the renderers
    done = [(t, i < len(finished)) for i, (t, _) in enumerate(done)]
    return {"done": done, "renders": len(finished), "finished": finished}


async def _gather(one: Any, n: int) -> list[tuple[float, bool]]:
    return list(await asyncio.gather(*(one() for _ in range(n))))


def threads_floor(n: int) -> dict[str, Any]:
    """No cache: N - 1 threads wait on a ``threading.Condition`` that one thread notifies
    after DELAY — what waking N threads costs this interpreter on this machine."""
    cond = threading.Condition()
    finished: list[float] = []
    led: list[bool] = []

    def call() -> bool:
        with cond:
            leads = not led
            led.append(True)
        if leads:  # the first caller "renders"
            time.sleep(DELAY)
            with cond:
                finished.append(time.time())
                cond.notify_all()
            return True
        with cond:
            while not finished:
                cond.wait()
        return False

    done = fire(n, time.time() + 0.05, call)
    return {"done": done, "renders": len(finished), "finished": finished}


def asyncio_floor(n: int) -> dict[str, Any]:
    """No cache: N - 1 coroutines await one future a worker thread sets after DELAY — what
    waking N waiters costs one event loop."""
    finished: list[float] = []

    async def main() -> list[tuple[float, bool]]:
        loop = asyncio.get_running_loop()
        shared = loop.run_in_executor(None, lambda: (time.sleep(DELAY),
                                                     finished.append(time.time())))

        async def one(led: bool) -> tuple[float, bool]:
            await shared
            return time.time(), led

        return list(await asyncio.gather(*(one(i == 0) for i in range(n))))

    done = asyncio.run(main())
    return {"done": done, "renders": len(finished), "finished": finished}


TASKS = {"voxcache": voxcache_task, "tts-cache": tts_cache_task}
ASYNC_TASKS = {"voxcache": voxcache_async_task, "tts-cache": tts_cache_async_task}


def _serve(inbox: Any, outbox: Any) -> None:
    """A worker process: run tasks until told to stop."""
    for kind, args in iter(inbox.get, None):
        try:
            outbox.put(TASKS[kind](*args))
        except Exception as exc:
            outbox.put({"error": f"{type(exc).__name__}: {exc}"})


class Workers:
    """Four long-lived processes, each with its own queue (so each takes exactly one share)."""

    def __init__(self, count: int) -> None:
        ctx = mp.get_context("spawn")
        self.outbox = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(count)]
        self.procs = [ctx.Process(target=_serve, args=(q, self.outbox), daemon=True)
                      for q in self.inboxes]
        for p in self.procs:
            p.start()

    def run(self, kind: str, root: str, text: str, shares: list[int]) -> list[dict[str, Any]]:
        """Give each process its share of callers, all released at the same instant."""
        start_at = time.time() + 1.0
        active = [(q, n) for q, n in zip(self.inboxes, shares, strict=False) if n]
        for q, n in active:
            q.put((kind, (root, text, n, start_at)))
        results = [self.outbox.get(timeout=120) for _ in active]
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise RuntimeError("; ".join(errors))
        return results

    def close(self) -> None:
        """Stop the processes."""
        for q in self.inboxes:
            q.put(None)
        for p in self.procs:
            p.join(timeout=10)


def prepared(ctx: Context, kind: str, name: str) -> str:
    """A cache folder created once up front, as ``voxcache serve`` does before its workers
    start: four processes creating one fresh index at the same instant can fail to open it,
    with voxcache and with tts-cache alike (see docs/internals/benchmarks.md)."""
    root = ctx.scratch(name)
    if kind == "voxcache":
        Cache(root).close()
    else:
        from ..helpers.peers import tts_cache_disk

        tts_cache_disk(root).close()
    return str(root)


def summarise(kind: str, mode: str, n: int, trials: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Renders per trial and the waiters' delay after the first render finished."""
    renders = [sum(r["renders"] for r in trial) for trial in trials]
    extra: list[float] = []
    total: list[float] = []
    for trial in trials:
        first = min(t for r in trial for t in r["finished"])
        for r in trial:
            extra += [t - first for t, led in r["done"] if not led]
            total += [t - first for t, _ in r["done"]]
    s = Stats.of(extra)
    return {"cache": kind, "mode": mode, "N": n, "renders (max of trials)": max(renders),
            "renders (mean)": sum(renders) / len(renders), "waiters": len(extra),
            "waiter extra median_ms": s.median * 1e3, "waiter extra p99_ms": s.p99 * 1e3,
            "trials": len(trials)}


def run(ctx: Context) -> None:
    """Every N, in one process and across four, for voxcache and tts-cache."""
    kinds = list(TASKS)
    if importlib.util.find_spec("tts_cache") is None:
        ctx.note("tts-cache is not installed; only voxcache measured")
        kinds = ["voxcache"]
    trials = ctx.pick(1, 3)
    counts = ctx.pick(COUNTS[:2], COUNTS)  # the CI smoke (--quick) asks N = 1 and 8
    rows = []
    workers = Workers(PROCESSES)
    try:
        for n in counts:  # the interpreter's own floor for each way of waiting
            rows.append(summarise("no cache (floor)", "1 process, threads", n,
                                  [[threads_floor(n)] for _ in range(trials)]))
            rows.append(summarise("no cache (floor)", "1 process, asyncio", n,
                                  [[asyncio_floor(n)] for _ in range(trials)]))
        for kind in kinds:
            for n in counts:
                one = [[TASKS[kind](str(ctx.scratch(f"{kind}-1p-{n}-{t}")), f"Stampede {n} {t}.",
                                    n, time.time() + 0.05)] for t in range(trials)]
                rows.append(summarise(kind, "1 process, threads", n, one))
                loop = [[ASYNC_TASKS[kind](str(ctx.scratch(f"{kind}-aio-{n}-{t}")),
                                           f"Stampede on a loop {n} {t}.", n)]
                        for t in range(trials)]
                rows.append(summarise(kind, "1 process, asyncio", n, loop))
                shares = [n // PROCESSES + (i < n % PROCESSES) for i in range(PROCESSES)]
                many = [workers.run(kind, prepared(ctx, kind, f"{kind}-4p-{n}-{t}"),
                                    f"Stampede across {n} {t}.", shares) for t in range(trials)]
                rows.append(summarise(kind, f"{PROCESSES} processes", n, many))
    finally:
        workers.close()
    ctx.table("stampede", f"Stampede: renders (target 1) and waiters' extra latency after the "
              f"render finished ({DELAY * 1e3:.0f} ms render)", rows, notes=[
                  "tts-cache does not report which caller rendered; its earliest finishers are "
                  "counted as the renderers.",
                  "`no cache (floor)`: N - 1 threads waiting on one `threading.Condition`, or "
                  "N - 1 coroutines awaiting one future, released when the 'render' ends: the "
                  "wake-up cost alone. voxcache's caches start with one take stored (a serving "
                  "process has written before)."])
    fig = plots.lines(list(counts), {
        f"{r0['cache']}, {r0['mode']}": [r["renders (max of trials)"] for r in rows
                                         if (r["cache"], r["mode"]) == (r0["cache"], r0["mode"])]
        for r0 in rows if r0["N"] == counts[0]}, "concurrent requests N", "renders",
        "Renders per stampede (target 1)", logx=True)
    ctx.plot("renders", fig)
    fig = plots.lines(list(counts), {
        f"{r0['cache']}, {r0['mode']}": [r["waiter extra p99_ms"] for r in rows
                                         if (r["cache"], r["mode"]) == (r0["cache"], r0["mode"])]
        for r0 in rows if r0["N"] == counts[0]}, "concurrent requests N",
        "p99 ms after the render finished", "Waiters' wake-up delay (p99)", logx=True)
    ctx.plot("wakeup", fig)
