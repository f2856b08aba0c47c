"""Deletes, purges and pin changes reach every process's memory tier within the bound.

Several ``voxcache serve`` processes (or ``--workers``) share one cache folder; each
keeps its own memory tier. A ``DELETE`` answered by one, or ``voxcache purge`` from
the CLI, used to leave the take in the others' memory: they kept answering HIT
until restarted. The bound stated in docs/internals/design.md is ``POLL_SECONDS`` (0.1 s) plus
a read; the tests allow 2 s so a loaded CI machine does not flake.
"""

from __future__ import annotations

import subprocess
import sys
from functools import partial

import httpx

from voxcache.cache import Cache
from voxcache.testing import forked, waiting

BOUND = 2.0


until = partial(waiting.until, bound=BOUND, what="the invalidation on every process")


def served_from_memory(url: str, key: str) -> bool:
    got = httpx.get(f"{url}/v1/audio/{key}", timeout=60)
    return got.status_code == 200 and got.headers["x-cache-tier"] == "memory"


def test_a_delete_on_one_process_reaches_the_others(serve_proc, tmp_path) -> None:
    cache_dir = tmp_path / "cache"
    with serve_proc(cache_dir) as (a, _), serve_proc(cache_dir) as (b, _):
        key = httpx.post(f"{a}/v1/audio/speech", json={
            "input": "Store closing in ten minutes.", "response_format": "wav"},
            timeout=60).headers["x-cache-key"]
        httpx.get(f"{b}/v1/audio/{key}", timeout=60)  # B reads it from disk into its memory tier
        assert served_from_memory(b, key)

        assert httpx.delete(f"{a}/v1/entries/{key}", timeout=60).status_code == 204
        until(lambda: httpx.get(f"{b}/v1/audio/{key}").status_code == 404)
        again = httpx.post(f"{b}/v1/audio/speech", json={
            "input": "Store closing in ten minutes.", "response_format": "wav"}, timeout=60)
        assert again.headers["x-cache"] == "MISS"


def test_a_purge_from_the_cli_reaches_every_server(serve_proc, tmp_path) -> None:
    cache_dir = tmp_path / "cache"
    with serve_proc(cache_dir) as (a, _), serve_proc(cache_dir) as (b, _):
        key = httpx.post(f"{a}/v1/audio/speech", json={
            "input": "Gate four is closed.", "response_format": "wav"},
            timeout=60).headers["x-cache-key"]
        httpx.get(f"{b}/v1/audio/{key}", timeout=60)
        assert served_from_memory(a, key) and served_from_memory(b, key)
        forked.run([sys.executable, "-m", "voxcache", "--cache-dir", str(cache_dir),
                    "--engine", "tone", "purge", "--key", key], check=True,
                   capture_output=True)
        for url in (a, b):
            until(lambda url=url: httpx.get(f"{url}/v1/audio/{key}").status_code == 404)


FOLLOWER = """
import sys, time
from voxcache.cache import Cache
from voxcache.entry import audio_entry
from voxcache.audio import Audio
cache = Cache(sys.argv[1])
key = "ab" * 32
cache.put(audio_entry(key, Audio(b"\\1\\0" * 800, 16000)))
print("stored", flush=True)
for line in sys.stdin:
    print(key in cache.in_process._pinned, cache.in_process.peek(key) is not None, flush=True)
"""


def test_pin_changes_and_deletes_reach_another_process_memory(tmp_path) -> None:
    """A pin made elsewhere (another process's Cache, or `voxcache pin` / `unpin` from the
    CLI) keeps the entry through this process's memory pressure; an unpin lets it go
    again; a delete drops it."""
    root = tmp_path / "cache"
    follower = forked.popen([sys.executable, "-c", FOLLOWER, str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def state() -> str:
        follower.stdin.write("?\n")  # type: ignore[union-attr]
        follower.stdin.flush()  # type: ignore[union-attr]
        return follower.stdout.readline().strip()  # type: ignore[union-attr]

    try:
        assert follower.stdout.readline().strip() == "stored"  # type: ignore[union-attr]
        cache = Cache(root)
        try:
            assert state() == "False True"
            assert cache.pin("ab" * 32)
            until(lambda: state() == "True True")
            assert cache.pin("ab" * 32, False)
            until(lambda: state() == "False True")
            for command, seen in (("pin", "True True"), ("unpin", "False True")):
                forked.run([sys.executable, "-m", "voxcache", "--cache-dir", str(root),
                            "--engine", "tone", command, "abab" * 4], check=True,
                           capture_output=True)  # the CLI, by a unique key prefix
                until(lambda seen=seen: state() == seen)
            assert cache.delete("ab" * 32)
            until(lambda: state() == "False False")
        finally:
            cache.close()
    finally:
        follower.stdin.close()  # type: ignore[union-attr]
        follower.wait(timeout=30)
