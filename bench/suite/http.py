"""Benchmark 2: HTTP hits — requests/s and latency with keep-alive at 1, 8 and 64 connections.

The limit is nginx serving the very same ~500 KB file with sendfile (through the shipped
``docs/operating/nginx.conf`` snippet, so the snippet is exercised too). voxcache is measured on its
content-addressed ``GET /v1/audio/{key}`` (a file response) and on ``POST /v1/audio/speech``,
a hit that must parse JSON and compute the key. wrk is the load generator; it shares the
two cores with the servers, as a client on the same host would.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from voxcache.cache import Cache

from ..helpers import plots, proc_cpu, servers, trials
from ..helpers.core import Context
from ..helpers.fixtures import entry_of_size

NAME = "http"
TITLE = "2. HTTP hits: voxcache serve vs nginx"

CONNECTIONS = (1, 8, 64)
CLIP_BYTES = 500_000
KEY = "5" * 64
"""A fixed key for the stored clip: GET needs no key computation."""
SPEECH_TEXT = " ".join(["Thank you for calling. All of our agents are busy right now."] * 26)
"""~1,560 characters: the tone engine renders about 500 KB of audio for it."""
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
SERVER_CPUS: set[int] | None = set(_CPUS[:-1]) if len(_CPUS) >= 2 else None
"""The servers share every CPU but the last; wrk gets the last one to itself, so the client
never takes a server's time (on 2 cores: servers on CPU 0, wrk on CPU 1)."""
WRK_CPUS: set[int] | None = {_CPUS[-1]} if len(_CPUS) >= 2 else None
WORKERS = max(1, len(SERVER_CPUS or _CPUS or [0, 1]))
"""Server worker processes: one per server CPU."""


def wrk(url: str, connections: int, seconds: float, script: Path | None = None) -> dict[str, float]:
    """Run wrk with keep-alive (pinned to ``WRK_CPUS``); return requests/s and the median
    and p99 latency (s)."""
    command = ["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d",
               f"{seconds}s", "--latency", "--timeout", "10s"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 60,
                         check=True, preexec_fn=servers.pinned(WRK_CPUS)).stdout
    latency = {m.group(1): float(m.group(2)) * _UNITS[m.group(3)]
               for m in re.finditer(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    done = re.search(r"(\d+) requests in", out)
    if rps is None or "50" not in latency:
        raise RuntimeError(f"could not read wrk's output:\n{out}")
    return {"rps": float(rps.group(1)), "p50": latency["50"], "p99": latency.get("99", 0.0),
            "errors": float(errors.group(1)) if errors else 0.0,
            "requests": float(done.group(1)) if done else 0.0}


def post_script(tmp: Path) -> Path:
    """A wrk Lua script that POSTs the speech request."""
    body = json.dumps({"model": "tone", "input": SPEECH_TEXT, "response_format": "wav"})
    script = tmp / "post.lua"
    script.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
                      'wrk.headers["Content-Type"] = "application/json"\n')
    return script


def fetch(url: str, body: bytes | None = None) -> tuple[int, bytes, dict[str, str]]:
    """One request, for checking a server answers what the benchmark expects."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.read(), dict(response.headers)


def prepare(ctx: Context) -> tuple[Path, bytes]:
    """A cache folder holding one ~500 KB take under ``KEY``; return it and the file's bytes."""
    root = ctx.scratch("cache")
    cache = Cache(root)
    try:
        entry = entry_of_size(KEY, CLIP_BYTES, meta={"tenant": "default", "voice": "bench"})
        cache.put(entry)
        return root, cache.folder.path_of(KEY).read_bytes()
    finally:
        cache.close()


def measure(ctx: Context, name: str, url: str, script: Path | None = None) -> list[dict[str, Any]]:
    """One wrk run at every connection count against one subject (the table; the headline
    ratios are interleaved trials, below)."""
    seconds = ctx.pick(1, 3)
    rows = []
    for c in ctx.pick(QUICK_CONNECTIONS, CONNECTIONS):
        r = wrk(url, c, seconds, script)
        rows.append({"server": name, "connections": c, "requests/s": r["rps"],
                     "median_ms": r["p50"] * 1e3, "p99_ms": r["p99"] * 1e3,
                     "non-2xx": int(r["errors"])})
    return rows


NGINX = "nginx (docs/operating/nginx.conf, sendfile)"
BARE = "bare ASGI app (uvicorn, bytes from memory)"
BARE_POST = "bare ASGI app, POST (reads the body, same bytes back)"
GET = "voxcache serve: GET /v1/audio/{key}"
POST = "voxcache serve: POST /v1/audio/speech"
RATIOS = (("HTTP hit throughput ÷ nginx (GET, 64 conn)", GET, NGINX, 64),
          ("HTTP hit throughput ÷ bare ASGI (GET, 64 conn)", GET, BARE, 64),
          ("HTTP hit throughput ÷ bare ASGI (POST, 64 conn)", POST, BARE, 64),
          ("POST hit ÷ bare ASGI app answering the same POST (8 conn)", POST, BARE_POST, 8),
          ("POST hit ÷ bare ASGI app answering the same POST (64 conn)", POST, BARE_POST, 64))
"""The headline ratios: (name, subject, baseline, connections), subject ÷ baseline req/s."""
QUICK_CONNECTIONS = (8,)
QUICK_RATIOS = (RATIOS[3],)
"""CI's smoke (``--quick``) runs every server and path once: the table at 8 connections and
the POST ratio: 14 s, where 8 and 64 connections and a GET ratio too took 27 s of the
smoke's 68 s (wrk keeps both cores busy while it runs, in a suite short of CPU)."""


def run(ctx: Context) -> None:
    """Every server up at once (pinned), a table of single runs, then the headline ratios as
    interleaved wrk trials."""
    if shutil.which("wrk") is None:
        ctx.note("wrk is not installed (Debian: apt-get install wrk); HTTP benchmark skipped")
        return
    root, blob = prepare(ctx)
    subjects: dict[str, tuple[str, Path | None]] = {}
    with contextlib.ExitStack() as stack:
        try:
            base = stack.enter_context(servers.nginx(root, ctx.scratch("nginx"), WORKERS,
                                                     SERVER_CPUS))
            status, body, headers = fetch(f"{base}/v1/audio/{KEY}")
            assert status == 200 and body == blob, "nginx snippet did not serve the stored take"
            subjects[NGINX] = (f"{base}/v1/audio/{KEY}", None)
        except FileNotFoundError as exc:
            ctx.note(f"{exc}; the nginx baseline is missing")
        if servers.serve_available():  # uvicorn is there: measure the Python limit too
            stored = next((root / "objects").rglob(f"{KEY}.wav"))
            base = stack.enter_context(servers.bare_asgi(
                stored, WORKERS, ctx.scratch("bare") / "bare.log", SERVER_CPUS))
            subjects[BARE] = (f"{base}/", None)
            # the same wrk POST (request line, headers, a body to read) the speech route gets
            subjects[BARE_POST] = (f"{base}/", post_script(ctx.scratch("wrk-bare")))
            subjects.update(start_voxcache(ctx, stack, root, blob))
        else:
            ctx.note("`voxcache serve` is not available in this checkout (service not built, "
                     "or the [service] extra is missing); only nginx was measured")
        rows = [row for name, (url, script) in subjects.items()
                for row in measure(ctx, name, url, script)]
        if not rows:
            return
        pinning = (f"servers pinned to CPU {sorted(SERVER_CPUS)}, wrk to CPU "
                   f"{sorted(WRK_CPUS or [])}" if SERVER_CPUS else "nothing pinned (one CPU)")
        ctx.table("http", f"HTTP hits, {len(blob) / 1000:.0f} KB WAV, keep-alive (wrk, one "
                  "run each)", rows,
                  notes=[f"nginx, voxcache serve and the bare ASGI app: {WORKERS} worker "
                         f"process(es) each; wrk: up to 2 threads; {pinning}. The headline "
                         "ratios are interleaved trials, not these single runs."])
        headline(ctx, subjects)
    servers_seen = list(dict.fromkeys(r["server"] for r in rows))
    ctx.plot("throughput", plots.grouped_bars(
        [f"{c} conn" for c in dict.fromkeys(r["connections"] for r in rows)],
        {s: [r["requests/s"] for r in rows if r["server"] == s] for s in servers_seen},
        "requests/s (log)", "HTTP hit throughput, ~500 KB clip"))


def start_voxcache(ctx: Context, stack: contextlib.ExitStack, root: Path, blob: bytes
                   ) -> dict[str, tuple[str, Path | None]]:
    """voxcache serve (tone engine) on the same folder, checked: GET by key and a POST hit."""
    subjects: dict[str, tuple[str, Path | None]] = {}
    base = stack.enter_context(servers.voxcache_serve(
        root, WORKERS, ctx.scratch("serve") / "serve.log", SERVER_CPUS))
    status, body, _ = fetch(f"{base}/v1/audio/{KEY}")
    if status != 200 or body != blob:
        ctx.note(f"GET /v1/audio/KEY answered {status} with {len(body)} bytes; skipped")
    else:
        subjects[GET] = (f"{base}/v1/audio/{KEY}", None)
    speech = json.dumps({"model": "tone", "input": SPEECH_TEXT,
                         "response_format": "wav"}).encode()
    for _ in range(2):  # the first renders (a miss); every later one is a hit
        status, body, headers = fetch(f"{base}/v1/audio/speech", speech)
    cache_header = {k.lower(): v for k, v in headers.items()}.get("x-cache", "?")
    if status != 200 or cache_header.upper() != "HIT":
        ctx.note(f"POST /v1/audio/speech answered {status}, X-Cache {cache_header}; skipped")
    else:
        subjects[POST] = (f"{base}/v1/audio/speech", post_script(ctx.scratch("wrk")))
    return subjects


def headline(ctx: Context, subjects: dict[str, tuple[str, Path | None]]) -> None:
    """Each ratio as ``ctx.repeat`` interleaved rounds of wrk trials (one warm-up round
    excluded): subject and baseline take turns, so a noisy neighbour costs both. Each trial
    also counts the server's CPU seconds (/proc), so each ratio has a twin that the host's
    other load moves far less: requests per server CPU-second."""
    seconds = ctx.pick(1, 5)
    pids = {name: proc_cpu.holders(int(url.split(":")[2].split("/")[0]))
            for name, (url, _) in subjects.items()}
    for name, subject, baseline, connections in ctx.pick(QUICK_RATIOS, RATIOS):
        if subject not in subjects or baseline not in subjects:
            continue
        runs: dict[str, list[dict[str, float]]] = {subject: [], baseline: []}
        summary = trials.interleave(
            wrk_trial(subjects[subject], pids[subject], connections, seconds, runs[subject]),
            wrk_trial(subjects[baseline], pids[baseline], connections, seconds, runs[baseline]),
            ctx.repeat)
        p99 = {who: statistics.median(r["p99"] for r in runs[who][1:]) for who in runs}
        ctx.trials(name, summary,
                   f"{summary.subject:,.0f} vs {summary.baseline:,.0f} requests/s (medians of "
                   f"{seconds} s trials); p99 {p99[subject] * 1e3:.1f} vs "
                   f"{p99[baseline] * 1e3:.1f} ms")
        if pids[subject] and pids[baseline]:
            per_cpu = trials.Summary.of([r["per_cpu_s"] for r in runs[subject][1:]],
                                        [r["per_cpu_s"] for r in runs[baseline][1:]],
                                        summary.load_before, summary.load_after)
            ctx.trials(f"{name}, per server CPU-second", per_cpu,
                       f"{per_cpu.subject:,.0f} vs {per_cpu.baseline:,.0f} requests per CPU "
                       "second the server used (same trials)")


def wrk_trial(subject: tuple[str, Path | None], pids: list[int], connections: int,
              seconds: float, log: list[dict[str, float]]) -> Any:
    """One trial: a wrk run against ``subject`` (url, script); its requests/s, logged with
    the requests per CPU-second its server processes used meanwhile."""
    def one() -> float:
        url, script = subject
        used = proc_cpu.cpu_seconds(pids)
        result = wrk(url, connections, seconds, script)
        used = proc_cpu.cpu_seconds(pids) - used
        result["per_cpu_s"] = result["requests"] / used if used > 0 else math.nan
        log.append(result)
        return result["rps"]
    return one
