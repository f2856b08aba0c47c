"""Real Redis, Redis Cluster, S3 (moto), Prometheus and voxcache servers on free ports.

Child processes started and stopped by their own pid (never the machine's Redis on 6379),
on random free ports in 20000-40000 (with the cluster bus port +10000), shared by the
tests, ``bench`` and multi-node checks:

    with RedisServer(tmp) as server:   with RedisClusterServers(tmp) as cl:
    with MotoS3Server() as s3:         with PrometheusServer(tmp, scrape_configs) as prom:
    with serve_process(folder, "--workers", "2") as (url, proc):
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from . import forked

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
START_TIMEOUT = 30.0


def redis_available() -> bool:
    """Whether redis-server and redis-cli are installed (Debian package redis-server)."""
    return os.access(REDIS_SERVER, os.X_OK) and os.access(REDIS_CLI, os.X_OK)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


PORTS = (12000, 22000)
"""Where test servers listen: below the kernel's ephemeral range (32768 and up), so that
no outgoing connection takes a port between its pick and the server's bind; a cluster
node's bus (port + 10000) stays below it too. Ports from 0 (the kernel's pick) come from
that range, and a parallel run's other worker or any client may grab one first."""


def port_range() -> tuple[int, int]:
    """This process's share of ``PORTS``: pytest-xdist workers (``gw0``, ``gw1`` …) each
    pick from their own slice, so two workers never hand out one port."""
    low, high = PORTS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return low, high
    share = (high - low) // count
    index = int(worker[2:]) % count
    return low + index * share, low + (index + 1) * share


def free_port(*, with_bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1 from this process's range (and port + 10000 free,
    for a cluster node's bus)."""
    low, high = port_range()
    for _ in range(500):
        port = random.randrange(low, high)
        if _bindable(port) and (not with_bus or _bindable(port + 10000)):
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def _wait_for(check: Any, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout:g} s")


def _cli(port: int, *args: str, timeout: float = 10.0) -> str:
    return subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=timeout, check=True).stdout


class _Process:
    """A child server process: start, stop (SIGTERM), kill (SIGKILL), by its own pid."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:  # pragma: no cover - subclasses override
        raise NotImplementedError

    def _ready(self) -> bool:  # pragma: no cover - subclasses override
        raise NotImplementedError

    def start(self) -> None:
        """Start the server (again, after ``kill``/``stop``) on the same port."""
        if self.running:
            return
        self.process = subprocess.Popen(self._command(), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        _wait_for(lambda: self.process.poll() is None and self._ready(), repr(self))

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-whatever, as in a crash."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        if not self.running:
            return
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class RedisServer(_Process):
    """One ``redis-server`` keeping nothing on disk (``--save "" --appendonly no``)."""

    def __init__(self, folder: Path, port: int | None = None, *, cluster: bool = False,
                 extra: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.port = port or free_port(with_bus=cluster)
        self.folder = Path(folder) / f"redis-{self.port}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.extra = extra

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        command = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", str(self.folder),
                   "--daemonize", "no", "--logfile", str(self.folder / "redis.log")]
        if self.cluster:
            command += ["--cluster-enabled", "yes",
                        "--cluster-config-file", str(self.folder / "nodes.conf"),
                        "--cluster-node-timeout", "1000"]
        return command + list(self.extra)

    def _ready(self) -> bool:
        return _cli(self.port, "PING", timeout=2).strip() == "PONG"

    def cli(self, *args: str) -> str:
        """Run a redis-cli command against this server; its output."""
        return _cli(self.port, *args)

    def __repr__(self) -> str:
        return f"redis-server on port {self.port}"


class RedisClusterServers:
    """A Redis Cluster of ``masters`` masters (and ``replicas`` replicas each), made with
    ``redis-cli --cluster create`` and ready once every node says ``cluster_state:ok``."""

    def __init__(self, folder: Path, masters: int = 3, replicas: int = 0,
                 extra: tuple[str, ...] = ()) -> None:
        self.nodes = [RedisServer(folder, cluster=True, extra=extra)
                      for _ in range(masters * (1 + replicas))]
        self.replicas = replicas

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run([REDIS_CLI, "--cluster", "create",
                        *(f"127.0.0.1:{node.port}" for node in self.nodes),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       capture_output=True, text=True, timeout=60, check=True)
        self.wait_ok()

    def wait_ok(self, nodes: list[RedisServer] | None = None) -> None:
        """Wait until every (running) node reports ``cluster_state:ok``."""
        for node in nodes or [n for n in self.nodes if n.running]:
            _wait_for(lambda n=node: "cluster_state:ok" in n.cli("CLUSTER", "INFO"),
                      f"cluster state on {node!r}")

    def node_for(self, redis_key: str) -> RedisServer:
        """The running master serving the slot of ``redis_key`` (as the first running node
        sees it: after a failover, other nodes may learn of it a moment later)."""
        probe = next(node for node in self.nodes if node.running)
        slot = int(probe.cli("CLUSTER", "KEYSLOT", redis_key))
        for line in probe.cli("CLUSTER", "NODES").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            for span in fields[8:]:
                low, _, high = span.partition("-")
                if low.isdigit() and int(low) <= slot <= int(high or low):
                    port = int(fields[1].split(":")[1].split("@")[0])
                    return next(node for node in self.nodes if node.port == port)
        raise LookupError(f"no master serves slot {slot}")

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> RedisClusterServers:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_ATOMIC_PUTS = """
import threading, sys
from moto.s3.responses import S3Response
from moto.server import main
unlocked, lock = S3Response.put_object, threading.Lock()
def put_object(self):
    with lock:
        return unlocked(self)
S3Response.put_object = put_object
main(sys.argv[1:])
"""
"""moto's server with one PUT at a time: moto checks ``If-None-Match``/``If-Match`` and then
writes, so two racing conditional PUTs could both succeed (1 key in 400 under load), where
S3's are atomic; first-writer-wins is what the shared tiers are built on."""


class MotoS3Server(_Process):
    """moto's S3 server mode in its own process, its conditional writes atomic as S3's."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__()
        self.port = port or free_port()
        self._client: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point boto3 (and the S3 tier) here."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull}

    def _command(self) -> list[str]:
        return [sys.executable, "-c", _ATOMIC_PUTS, "-H", "127.0.0.1", "-p", str(self.port)]

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1) as response:
            return response.status == 200

    def client(self) -> Any:
        """A plain boto3 client of this server (for tests' own checks and damage)."""
        import boto3

        if self._client is None:
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint, region_name="us-east-1",
                aws_access_key_id="testing", aws_secret_access_key="testing")
        return self._client

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def __repr__(self) -> str:
        return f"moto S3 server on port {self.port}"


class PrometheusServer(_Process):
    """Debian's ``prometheus`` with its own config and data folder: ``scrape_configs`` as in
    prometheus.yml (scraped every second), ``rule_files`` evaluated every second."""

    def __init__(self, folder: Path, scrape_configs: list[dict[str, Any]],
                 rule_files: tuple[str | Path, ...] = (), port: int | None = None) -> None:
        super().__init__()
        self.port = port or free_port()
        self.folder = Path(folder) / f"prometheus-{self.port}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.scrape_configs = scrape_configs
        self.rule_files = [str(f) for f in rule_files]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        import json

        config = self.folder / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": self.rule_files, "scrape_configs": self.scrape_configs}))
        return [PROMETHEUS, f"--config.file={config}",
                f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
            return response.status == 200

    def query(self, expr: str) -> dict[str, Any]:
        """An instant query's ``data`` (``resultType``, ``result``); raises if Prometheus
        refuses the expression."""
        import json
        from urllib.parse import urlencode

        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urlencode({'query': expr})}",
                                    timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus refused {expr!r}: {body}")
        return body["data"]

    def __repr__(self) -> str:
        return f"prometheus on port {self.port}"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the developer's ``VOXCACHE_*`` settings (what a
    test's ``voxcache`` is started with), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("VOXCACHE_")}, **extra}


@contextlib.contextmanager
def serve_process(cache_dir: Path, *args: str, engine: str = "tone",
                  config: Path | None = None, env: dict[str, str] | None = None,
                  ready_timeout: float = 90.0,
                  ) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A real ``voxcache serve`` subprocess in a clean ``VOXCACHE_*`` environment (``env``
    adds to it); yields its URL once /readyz answers 200, and its process (output piped,
    text), which is stopped with SIGTERM, then SIGKILL, when the block ends."""
    port = free_port()
    cmd = [sys.executable, "-m", "voxcache.cli", "--cache-dir", str(cache_dir),
           "--engine", engine]
    if config is not None:
        cmd += ["--config", str(config)]
    cmd += ["serve", "--port", str(port), *args]
    proc = forked.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        env={**clean_env(), **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while not _answers_ready(proc, url):
            if time.monotonic() > deadline:
                raise RuntimeError(f"voxcache serve did not become ready in {ready_timeout:g} s")
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers_ready(proc: subprocess.Popen[str], url: str) -> bool:
    if proc.poll() is not None:
        output = proc.stdout.read() if proc.stdout is not None else ""
        raise RuntimeError(f"voxcache serve exited: {output}")
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def serve_in_thread(app: Any, sock: socket.socket | None = None, *,
                    lifespan: Literal["on", "off"] = "off") -> Iterator[str]:
    """Run an ASGI ``app`` on uvicorn in a thread of this process, on a loopback socket bound
    before it starts (no free-port race); yield its base URL. ``lifespan="on"`` runs the
    app's startup and shutdown as ``voxcache serve`` does; off, the caller owns what the app
    holds."""
    import uvicorn

    if sock is None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the app did not start serving")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
