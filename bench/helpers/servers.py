"""Starting the HTTP servers the benchmarks compare: nginx (with the shipped
``docs/operating/nginx.conf`` snippet), ``voxcache serve`` and ASGI apps, each on a free loopback
port."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voxcache.testing.servers import free_port

REPO = Path(__file__).resolve().parents[2]
SNIPPET = REPO / "docs" / "operating" / "nginx.conf"
SNIPPET_CACHE_DIR = "/var/cache/voxcache"

NGINX_CONF = """\
{user}worker_processes {workers};
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        include {snippet};
    }}
}}
"""


def pinned(cpus: set[int] | None) -> Any:
    """A ``preexec_fn`` that pins a server (and the workers it forks) to ``cpus``."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def wait_for(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    """Poll ``url`` until it answers (any HTTP status) or the process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server we started, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def nginx(cache_dir: Path, tmp: Path, workers: int = 2, cpus: set[int] | None = None
          ) -> Iterator[str]:
    """Run nginx serving ``cache_dir`` through the shipped snippet; yield its base URL."""
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists()
                                       else None)
    if binary is None:
        raise FileNotFoundError("nginx is not installed (Debian: apt-get install nginx)")
    tmp.mkdir(parents=True, exist_ok=True)
    snippet = tmp / "voxcache.conf"
    snippet.write_text(SNIPPET.read_text().replace(SNIPPET_CACHE_DIR, str(cache_dir)))
    port = free_port()
    user = "user root;\n" if os.geteuid() == 0 else ""  # the cache folder is 0700
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(user=user, tmp=tmp, port=port, snippet=snippet,
                                      workers=workers))
    proc = subprocess.Popen([binary, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=pinned(cpus))
    try:
        wait_for(f"http://127.0.0.1:{port}/", 20, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def serve_available() -> bool:
    """True when this checkout has ``voxcache serve`` (the service and its extra)."""
    import importlib.util

    try:
        return (importlib.util.find_spec("voxcache.cli.serve") is not None
                and importlib.util.find_spec("voxcache.service.app") is not None
                and importlib.util.find_spec("uvicorn") is not None)
    except ImportError:
        return False


@contextlib.contextmanager
def voxcache_serve(cache_dir: Path, workers: int, log: Path, cpus: set[int] | None = None
                   ) -> Iterator[str]:
    """Run ``voxcache serve`` with the tone engine on ``cache_dir``; yield its base URL."""
    port = free_port()
    command = [sys.executable, "-c", "import sys; from voxcache.cli import main; sys.exit(main())",
               "--cache-dir", str(cache_dir),
               "--engine", "tone", "serve", "--port", str(port), "--workers", str(workers),
               "--no-access-log"]  # nginx beside it runs with access_log off
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=pinned(cpus))
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz", 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@contextlib.contextmanager
def bare_asgi(path: Path, workers: int, log: Path, cpus: set[int] | None = None
              ) -> Iterator[str]:
    """Run ``bench.helpers.bare_asgi`` (returns ``path``'s bytes) on uvicorn; yield its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "bench.helpers.bare_asgi:app", "--port", str(port),
               "--workers", str(workers), "--log-level", "warning"]
    env = {**os.environ, "VOXCACHE_BENCH_FILE": str(path)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=Path(__file__).resolve().parents[2],
                                preexec_fn=pinned(cpus))
    try:
        wait_for(f"http://127.0.0.1:{port}/", 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
