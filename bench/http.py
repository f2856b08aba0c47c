"""Benchmark 2: HTTP hits — requests/s and latency with keep-alive at 1, 8 and 64 connections.

The limit is nginx serving the very same ~500 KB file with sendfile (through the shipped
``docs/operating/nginx.conf`` snippet, so the snippet is exercised too). voxcache is measured on its
content-addressed ``GET /v1/audio/{key}`` (a file response) and on ``POST /v1/audio/speech``,
a hit that must parse JSON and compute the key. wrk is the load generator; it shares the
two cores with the servers, as a client on the same host would.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from voxcache.cache import Cache

from . import plots, servers
from .core import Context, ratio
from .fixtures import entry_of_size

NAME = "http"
TITLE = "2. HTTP hits: voxcache serve vs nginx"

CONNECTIONS = (1, 8, 64)
CLIP_BYTES = 500_000
KEY = "5" * 64
"""A fixed key for the stored clip: GET needs no key computation."""
SPEECH_TEXT = " ".join(["Thank you for calling. All of our agents are busy right now."] * 26)
"""~1,560 characters: the tone engine renders about 500 KB of audio for it."""
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def wrk(url: str, connections: int, seconds: float, script: Path | None = None) -> dict[str, float]:
    """Run wrk with keep-alive; return requests/s and the median and p99 latency (s)."""
    command = ["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d",
               f"{seconds}s", "--latency", "--timeout", "10s"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 60,
                         check=True).stdout
    latency = {m.group(1): float(m.group(2)) * _UNITS[m.group(3)]
               for m in re.finditer(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if rps is None or "50" not in latency:
        raise RuntimeError(f"could not read wrk's output:\n{out}")
    return {"rps": float(rps.group(1)), "p50": latency["50"], "p99": latency.get("99", 0.0),
            "errors": float(errors.group(1)) if errors else 0.0}


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
        return root, cache.disk.path_of(KEY).read_bytes()
    finally:
        cache.close()


def measure(ctx: Context, name: str, url: str, script: Path | None = None) -> list[dict[str, Any]]:
    """wrk at every connection count against one subject."""
    seconds = ctx.pick(1, 8)
    rows = []
    for c in CONNECTIONS:
        r = wrk(url, c, seconds, script)
        rows.append({"server": name, "connections": c, "requests/s": r["rps"],
                     "median_ms": r["p50"] * 1e3, "p99_ms": r["p99"] * 1e3,
                     "non-2xx": int(r["errors"])})
    return rows


def run(ctx: Context) -> None:
    """nginx first (the limit), then voxcache serve's GET and POST paths."""
    if shutil.which("wrk") is None:
        ctx.note("wrk is not installed (Debian: apt-get install wrk); HTTP benchmark skipped")
        return
    root, blob = prepare(ctx)
    rows: list[dict[str, Any]] = []
    try:
        with servers.nginx(root, ctx.scratch("nginx")) as base:
            status, body, headers = fetch(f"{base}/v1/audio/{KEY}")
            assert status == 200 and body == blob, "nginx snippet did not serve the stored take"
            rows += measure(ctx, "nginx (docs/operating/nginx.conf, sendfile)",
                            f"{base}/v1/audio/{KEY}")
    except FileNotFoundError as exc:
        ctx.note(f"{exc}; the nginx baseline is missing")
    if servers.serve_available():  # uvicorn is there: measure the Python limit too
        stored = next((root / "objects").rglob(f"{KEY}.wav"))
        with servers.bare_asgi(stored, 2, ctx.scratch("bare") / "bare.log") as base:
            rows += measure(ctx, "bare ASGI app (uvicorn, bytes from memory)", f"{base}/")
            # the same wrk POST (request line, headers, a body to read) the speech route gets
            rows += measure(ctx, "bare ASGI app, POST (reads the body, same bytes back)",
                            f"{base}/", post_script(ctx.scratch("wrk-bare")))
    if not servers.serve_available():
        ctx.note("`voxcache serve` is not available in this checkout (service not built, or "
                 "the [service] extra is missing); only nginx was measured")
    else:
        rows += measure_voxcache(ctx, root, blob)
    if not rows:
        return
    ctx.table("http", f"HTTP hits, {len(blob) / 1000:.0f} KB WAV, keep-alive (wrk)", rows,
              notes=["nginx: 2 worker processes; voxcache serve and the bare ASGI app: 2 uvicorn "
                     "workers; wrk: up to 2 threads; all on the same 2 cores."])
    headline(ctx, rows)
    servers_seen = list(dict.fromkeys(r["server"] for r in rows))
    ctx.plot("throughput", plots.grouped_bars(
        [f"{c} conn" for c in CONNECTIONS],
        {s: [r["requests/s"] for r in rows if r["server"] == s] for s in servers_seen},
        "requests/s (log)", "HTTP hit throughput, ~500 KB clip"))


def measure_voxcache(ctx: Context, root: Path, blob: bytes) -> list[dict[str, Any]]:
    """voxcache serve (2 workers, tone engine) on the same folder: GET by key and POST."""
    rows: list[dict[str, Any]] = []
    with servers.voxcache_serve(root, 2, ctx.scratch("serve") / "serve.log") as base:
        status, body, _ = fetch(f"{base}/v1/audio/{KEY}")
        if status != 200 or body != blob:
            ctx.note(f"GET /v1/audio/KEY answered {status} with {len(body)} bytes; skipped")
        else:
            rows += measure(ctx, "voxcache serve: GET /v1/audio/{key}", f"{base}/v1/audio/{KEY}")
        script = post_script(ctx.scratch("wrk"))
        speech = json.dumps({"model": "tone", "input": SPEECH_TEXT,
                             "response_format": "wav"}).encode()
        for _ in range(2):  # the first renders (a miss); every later one is a hit
            status, body, headers = fetch(f"{base}/v1/audio/speech", speech)
        cache_header = {k.lower(): v for k, v in headers.items()}.get("x-cache", "?")
        if status != 200 or cache_header.upper() != "HIT":
            ctx.note(f"POST /v1/audio/speech answered {status}, X-Cache {cache_header}; skipped")
        else:
            rows += measure(ctx, f"voxcache serve: POST /v1/audio/speech ({len(body) // 1000} KB)",
                            f"{base}/v1/audio/speech", script)
    return rows


def headline(ctx: Context, rows: list[dict[str, Any]]) -> None:
    """HTTP hit throughput ÷ nginx and ÷ the bare ASGI app at 64 connections, and the
    POST hit ÷ the bare app answering the same POST at 8 and 64 (issue 15's measure)."""
    at = {r["server"]: r for r in rows if r["connections"] == CONNECTIONS[-1]}
    for prefix, limit in (("nginx", "nginx"), ("bare ASGI app (", "bare ASGI")):
        base = next((r for s, r in at.items() if s.startswith(prefix)), None)
        if base is None:
            continue
        for server, r in at.items():
            if server.startswith("voxcache"):
                label = "GET" if "GET" in server else "POST"
                _ratio_line(ctx, f"HTTP hit throughput ÷ {limit} ({label}, 64 conn)", r, base)
    for connections in (8, CONNECTIONS[-1]):
        by = {r["server"]: r for r in rows if r["connections"] == connections}
        bare = next((r for s, r in by.items() if s.startswith("bare ASGI app, POST")), None)
        post = next((r for s, r in by.items() if s.startswith("voxcache serve: POST")), None)
        if bare is not None and post is not None:
            _ratio_line(ctx, f"POST hit ÷ bare ASGI app answering the same POST "
                             f"({connections} conn)", post, bare)


def _ratio_line(ctx: Context, name: str, subject: dict[str, Any],
                base: dict[str, Any]) -> None:
    ctx.headline[name] = {
        "value": ratio(subject["requests/s"], base["requests/s"]),
        "detail": f"{subject['requests/s']:,.0f} vs {base['requests/s']:,.0f} requests/s; "
                  f"p99 {subject['p99_ms']:.1f} vs {base['p99_ms']:.1f} ms"}
