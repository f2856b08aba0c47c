"""The docs' quick starts, run as written: docs/operating/cluster.md ("Three nodes behind a
balancer") and docs/operating/edge.md ("Quick start").

Each ```bash block of the section is split into its commands (``\\`` continuations and
here-documents kept whole) and each command runs in bash, in order, on the "machine" the
doc means (its own folder and HOME, so its own default cache folder). What the test changes
is only what a doc cannot know: host names and ports (to free loopback ports of this
test's own redis-server cluster, moto S3 server and nodes), ``/etc`` and ``/var`` paths
(to this test's folder), the doc's placeholder secret, and the engine of the cluster's
nodes (the tone engine, for speed: the engine is beside the point there). A long-running
command (``serve``, ``--every``) runs in the background until it answers. Then the test
checks what the doc says happens.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from voxcache.testing.servers import (
    MotoS3Server,
    RedisClusterServers,
    free_port,
    redis_available,
)

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not redis_available(), reason="needs redis-server")


def section(doc: str, heading: str) -> str:
    text = (ROOT / "docs" / "operating" / doc).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def commands(block: str) -> list[str]:
    """The block's commands: comments and blank lines dropped, continuations and
    here-documents kept whole (as bash reads them)."""
    lines, found, i = block.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command = [line]
        while command[-1].rstrip().endswith("\\"):
            command.append(lines[i])
            i += 1
        heredoc = re.search(r"<<'(\w+)'", line)
        if heredoc:
            while lines[i] != heredoc.group(1):
                command.append(lines[i])
                i += 1
            command.append(lines[i])
            i += 1
        found.append("\n".join(command))
    return found


@dataclass
class Machine:
    """One of the doc's machines: a folder, a HOME (so its own ~/.cache/voxcache), an
    environment that ``export`` changes, and the commands it runs in the background."""

    folder: Path
    env: dict[str, str]
    swaps: dict[str, str]
    background: list[subprocess.Popen[str]] = field(default_factory=list)

    def text(self, command: str) -> str:
        for old, new in self.swaps.items():
            command = command.replace(old, new)
        return command

    def run(self, command: str) -> str:
        """Run to the end; export's changes are kept. Output (stdout and stderr)."""
        done = subprocess.run(["bash", "-c", f"{self.text(command)}\nenv -0 > .env.dump"],
                              cwd=self.folder, env=self.env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        dump = (self.folder / ".env.dump").read_text()
        self.env = dict(item.split("=", 1) for item in dump.split("\0") if "=" in item)
        return done.stdout + done.stderr

    def start(self, command: str) -> subprocess.Popen[str]:
        """Start a command that runs until stopped (bash execs it: signals reach it)."""
        proc = subprocess.Popen(["bash", "-c", self.text(command).rstrip().rstrip("&")],
                                cwd=self.folder, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        self.background.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()


def machine(tmp_path: Path, name: str, bin_dir: Path, swaps: dict[str, str],
            **env: str) -> Machine:
    folder = tmp_path / name
    (folder / "home").mkdir(parents=True)
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("VOXCACHE_", "AWS_", "XDG_"))}
    return Machine(folder, {**clean, "HOME": str(folder / "home"),
                            "PATH": f"{bin_dir}:{clean['PATH']}", **env}, swaps)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """``voxcache`` and ``python`` as an installed voxcache gives them (this checkout's)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "voxcache").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m voxcache "$@"\n')
    (folder / "voxcache").chmod(0o755)
    (folder / "python").symlink_to(sys.executable)
    return folder


def wait_ready(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.communicate()[0]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return
        assert time.monotonic() < deadline, f"nothing ready on port {port}"
        time.sleep(0.1)


@contextlib.contextmanager
def stopping(*machines: Machine) -> Iterator[None]:
    try:
        yield
    finally:
        for m in machines:
            m.stop()


def test_cluster_quick_start(tmp_path: Path, bin_dir: Path) -> None:
    text = section("cluster.md", "Three nodes behind a balancer")
    (config,) = blocks(text, "toml")
    setup, calls = blocks(text, "bash")
    with MotoS3Server() as s3, RedisClusterServers(tmp_path / "redis", masters=3) as redis:
        ports = [free_port(), free_port()]
        etc = tmp_path / "etc"
        etc.mkdir()
        shared = {"redis+cluster://10.0.0.5:7000": redis.url,
                  "https://minio.internal:9000": s3.endpoint,
                  "AWS_ACCESS_KEY_ID=voxcache": "AWS_ACCESS_KEY_ID=testing",
                  "AWS_SECRET_ACCESS_KEY=…": "AWS_SECRET_ACCESS_KEY=testing",
                  "/etc/voxcache/": f"{etc}/",
                  "node-1:8000": f"127.0.0.1:{ports[0]}", "node-2:8000": f"127.0.0.1:{ports[1]}"}
        nodes = [machine(tmp_path, f"node-{i + 1}", bin_dir, {
            **shared, "/var/cache/voxcache": str(tmp_path / f"node-{i + 1}" / "cache"),
            "--port 8000": f"--port {port}"}, VOXCACHE_ENGINE="tone",
            AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
            for i, port in enumerate(ports)]
        (etc / "voxcache.toml").write_text(nodes[0].text(config))
        export, bucket, serve = commands(setup)
        assert export.startswith("export AWS_ENDPOINT_URL=") and "create_bucket" in bucket
        with stopping(*nodes):
            for i, node in enumerate(nodes):
                node.run(export)
                if i == 0:
                    node.run(bucket)  # "once, from any node"
                wait_ready(node.start(serve), ports[i])
            for port in ports:  # the bucket was there: S3 is up on every node
                tiers = httpx.get(f"http://127.0.0.1:{port}/readyz").json()["tiers"]
                assert tiers["s3"]["state"] == "ok" and tiers["redis"]["state"] == "ok", tiers
            first, second = (nodes[0].run(c) for c in commands(calls))
    assert re.search(r"(?im)^x-cache: MISS\r?$", first), first
    assert re.search(r"(?im)^x-cache-tier: engine\r?$", first)
    # HIT once node-1's write reached Redis; JOINED (also from redis) when node-2 asked
    # while node-1 was still writing it
    assert re.search(r"(?im)^x-cache: (HIT|JOINED)\r?$", second), second
    assert re.search(r"(?im)^x-cache-tier: redis\r?$", second), second
    folder = nodes[0].folder
    assert (folder / "1.wav").read_bytes() == (folder / "2.wav").read_bytes()


def test_edge_quick_start(tmp_path: Path, bin_dir: Path) -> None:
    (block,) = blocks(section("edge.md", "Quick start"), "bash")
    steps = commands(block)
    center_port, edge_port = free_port(), free_port()
    etc = tmp_path / "etc"
    etc.mkdir()
    swaps = {"/etc/voxcache/": f"{etc}/", "center:8000": f"127.0.0.1:{center_port}",
             "--port 8000": f"--port {center_port}",
             "serve --upstream": f"serve --port {edge_port} --upstream"}
    center, edge, device = (machine(tmp_path, name, bin_dir, swaps)
                            for name in ("center", "edge", "device"))
    where = [("keygen", center), ("cat > center.toml", center), ("center.toml serve", center),
             ("cat > edge.toml", edge), ("edge.toml serve", edge), ("pack pull", edge),
             ("pack export", center), ("pack import", device)]
    assert [name for name, _ in where if not any(name in s for s in steps)] == []
    assert len(steps) == len(where), steps
    pulled = ""
    with stopping(center, edge, device):
        for step in steps:
            ((_, on),) = [(name, m) for name, m in where if name in step]
            if "serve" in step:
                wait_ready(on.start(step), center_port if on is center else edge_port)
                if on is center:  # the center's own traffic: something to publish
                    spoken = httpx.post(
                        f"http://127.0.0.1:{center_port}/v1/audio/speech",
                        json={"input": "Platform two.", "voice": "en_US-joe-medium"},
                        headers={"Authorization": "Bearer a-key-for-the-devices"}, timeout=60)
                    assert spoken.status_code == 200
            elif "--every" in step:
                pull = on.start(step)
                assert pull.stdout is not None
                pulled = pull.stdout.readline()  # the first round's report, at once
                pull.send_signal(signal.SIGTERM)  # "Ctrl-C or SIGTERM stops it cleanly"
                rest, _ = pull.communicate(timeout=30)
                assert pull.returncode == 130, pulled + rest
            elif "pack import" in step:
                (device.folder / "joe.vxpack").write_bytes(
                    (center.folder / "joe.vxpack").read_bytes())  # carried to the device
                imported = on.run(step)
            else:
                on.run(step)
        through_edge = httpx.post(f"http://127.0.0.1:{edge_port}/v1/audio/speech",
                                  json={"input": "Platform two.", "voice": "en_US-joe-medium"},
                                  timeout=60)
    assert (etc / "pack.key").stat().st_mode & 0o777 == 0o600
    assert int(re.search(r"imported (\d+),", pulled).group(1)) > 0, pulled  # type: ignore[union-attr]
    assert through_edge.status_code == 200 and through_edge.headers["x-cache"] == "HIT"
    counts = re.search(r"imported (\d+), .* pinned (\d+)", imported)
    assert counts and int(counts.group(1)) > 0 and counts.group(1) == counts.group(2), imported
