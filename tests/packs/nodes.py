"""Helpers for edge and pack tests: real ``voxcache`` processes on free ports, CLI runs.

Servers are ``voxcache serve`` subprocesses whose output goes to a log file (a pipe
nobody reads would fill and stall them); each is stopped by its own Popen handle.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from voxcache.testing import forked
from voxcache.testing.cli import run_cli
from voxcache.testing.servers import clean_env, free_port

TONE_PHRASES = ["Your order is ready.", "Doors closing.", "Mind the gap.",
                "Welcome to the store.", "Please stand clear."]


def cli(*args: str, check: bool = True, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """Run ``voxcache ARGS`` (in this process: the real CLI, one-shot commands) and return
    its exit code, stdout and stderr."""
    done = run_cli(args, env)
    if check and done.returncode != 0:
        raise AssertionError(f"voxcache {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def cli_json(*args: str, expect: int = 0) -> dict[str, Any]:
    """``voxcache ARGS --json``: its one JSON document (and the exit code it must have)."""
    done = cli(*args, "--json", check=False)
    assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class Node:
    """A running ``voxcache serve``."""

    url: str
    port: int
    cache_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def post(self, path: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=60, **kwargs)

    def say(self, text: str, headers: dict[str, str] | None = None,
            **fields: Any) -> httpx.Response:
        """Native synthesis of ``text`` as a WAV (``fields``: more body fields)."""
        return self.post("/v1/synthesize", {"text": text, "response_format": "wav", **fields},
                         headers=headers)

    def stats(self) -> dict[str, Any]:
        return httpx.get(self.url + "/v1/stats", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def serve(cache_dir: Path, *args: str, engine: str = "tone", config: Path | None = None,
          port: int | None = None, env: dict[str, str] | None = None) -> Iterator[Node]:
    """``voxcache serve`` in a subprocess; yields once /readyz answers 200."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "voxcache.cli", "--cache-dir", str(cache_dir), "--engine",
           engine]
    if config is not None:
        cmd += ["--config", str(config)]
    cmd += ["serve", "--port", str(port), *args]
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir.parent / f"{cache_dir.name}-{port}.log"
    with open(log, "ab") as out:
        proc = forked.popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                            env={**clean_env(), **(env or {})})
    node = Node(f"http://127.0.0.1:{port}", port, cache_dir, proc, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"voxcache serve exited {proc.returncode}:\n{node.logs()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{node.url}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"voxcache serve did not become ready:\n{node.logs()}")
            time.sleep(0.1)
        yield node
    finally:
        node.stop()


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def entry_files(cache_dir: Path) -> dict[str, bytes]:
    """key → bytes of every published entry file in a cache folder."""
    found = {}
    objects = cache_dir / "objects"
    if objects.exists():
        for path in objects.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                found[path.name[:64]] = path.read_bytes()
    return found
