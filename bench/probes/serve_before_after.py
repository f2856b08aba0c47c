"""HTTP hits of ``voxcache serve`` from another tree and from this one, in one run.

``git worktree add /tmp/before <commit>`` then
``python -m bench.probes.serve_before_after /tmp/before/src [rounds]``: both servers (tone
engine, one worker, pinned like ``bench http``) answer a ~500 KB POST hit and a GET by key;
wrk takes turns between them, 3 s a run, the first round dropped; prints each server's median
requests/s and the per-round after ÷ before ratio as median (min–max).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from ..helpers import servers
from ..suite.http import SERVER_CPUS, SPEECH_TEXT, WORKERS, fetch, post_script, wrk

SECONDS = 3
CASES = (("POST hit, 8 conn", 8, True), ("POST hit, 64 conn", 64, True),
         ("GET hit, 8 conn", 8, False), ("GET hit, 64 conn", 64, False))


def start(stack: contextlib.ExitStack, work: Path, name: str, src: str) -> tuple[str, str]:
    """``voxcache serve`` importing voxcache from ``src``, a hit stored; (base URL, key)."""
    os.environ["PYTHONPATH"] = src  # the child imports this tree's voxcache
    try:
        base = stack.enter_context(servers.voxcache_serve(
            work / f"cache-{name}", WORKERS, work / f"{name}.log", SERVER_CPUS))
    finally:
        os.environ.pop("PYTHONPATH")
    speech = json.dumps({"model": "tone", "input": SPEECH_TEXT, "response_format": "wav"})
    for _ in range(2):  # a miss, then the hit measured
        status, _, headers = fetch(f"{base}/v1/audio/speech", speech.encode())
    lowered = {k.lower(): v for k, v in headers.items()}
    if status != 200 or lowered.get("x-cache", "").upper() != "HIT":
        raise SystemExit(f"{name}: POST answered {status}, X-Cache {lowered.get('x-cache')}")
    return base, lowered["x-cache-key"]


def main(argv: list[str]) -> None:
    """Measure every case, interleaved, and print the table."""
    before_src, rounds = argv[0], int(argv[1]) if len(argv) > 1 else 6
    here = str(Path(__file__).resolve().parents[2] / "src")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        script = post_script(work)
        urls = {name: start(stack, work, name, src)
                for name, src in (("before", before_src), ("after", here))}
        for label, connections, post in CASES:
            runs: dict[str, list[float]] = {"before": [], "after": []}
            for turn in range(rounds + 1):
                for name in ("before", "after") if turn % 2 == 0 else ("after", "before"):
                    base, key = urls[name]
                    url = f"{base}/v1/audio/speech" if post else f"{base}/v1/audio/{key}"
                    result = wrk(url, connections, SECONDS, script if post else None)
                    if result["errors"]:
                        raise SystemExit(f"{name}: {result['errors']:.0f} non-2xx answers")
                    if turn:
                        runs[name].append(result["rps"])
            ratios = [a / b for a, b in zip(runs["after"], runs["before"], strict=True)]
            print(f"{label}: before {statistics.median(runs['before']):,.0f} req/s, after "
                  f"{statistics.median(runs['after']):,.0f} req/s, after ÷ before "
                  f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})",
                  flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
