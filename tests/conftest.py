"""Fixtures shared by every test: cache folders and engines (real Piper and the tone engine)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.helpers.machine import cpu_model, load_average
from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
"""Piper parameters under which its output is byte-identical run to run."""


@pytest.fixture(scope="session")
def piper():
    """The real Piper engine with the bundled voice (loaded once for the session)."""
    from voxcache.engines.piper import PiperEngine

    return PiperEngine(threads=2)


@pytest.fixture
def tone() -> ToneEngine:
    """A fresh deterministic engine that records what reached it."""
    return ToneEngine()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def cache(cache_dir: Path) -> Iterator[Cache]:
    c = Cache(cache_dir, CacheConfig())
    yield c
    c.close()


@pytest.fixture
def cached_tone(tone: ToneEngine, cache: Cache) -> CachedEngine:
    return CachedEngine(tone, cache)


@pytest.fixture
def cached_piper(piper, cache: Cache) -> CachedEngine:
    return CachedEngine(piper, cache)


class GatedTone(ToneEngine):
    """A tone engine whose renders wait until the test opens ``gate`` (open at first)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()

    def render(self, request):
        assert self.gate.wait(30), "the test never opened the gate"
        yield from super().render(request)


@pytest.fixture
def gated_tone() -> GatedTone:
    """A tone engine a test can hold shut, to observe what arrives before a render ends."""
    return GatedTone()


@pytest.fixture
def make_tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount real tmpfs folders (``size``, ``nr_inodes``) for full-disk and read-only
    faults; each is unmounted after the test. Skips where mounting is not allowed."""
    mounts: list[Path] = []

    def mount(name: str = "fs", size: str = "2m", inodes: int | None = None) -> Path:
        target = tmp_path / name
        target.mkdir()
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
                              capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(target)
        return target

    yield mount
    for target in reversed(mounts):
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def _remount(target: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(target)], check=True)


@pytest.fixture
def remount() -> Callable[[Path, str], None]:
    """Remount a test tmpfs ``ro`` or ``rw`` (a folder that turns read-only under us)."""
    return _remount


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding ``slow`` tests first, fewest tests first (a few long tests each: the
    bench smoke, the cluster failures); then the rest by test count, most first.

    ``--dist loadfile`` hands out whole files in collection order (scripts/test.sh turns
    off xdist's own reordering by test count, which queued the four-test cluster failure file,
    140 s, last and left one worker running it alone). Starting the long files first lets
    the short ones fill in around them."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def weight(group: list[pytest.Item]) -> tuple[bool, int]:
        slow = any(item.get_closest_marker("slow") for item in group)
        return (not slow, len(group) if slow else -len(group))

    items[:] = [item for group in sorted(files.values(), key=weight) for item in group]


_LOAD_AT_START = pytest.StashKey[str]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_LOAD_AT_START] = load_average()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The host under the run's figures (the same code takes 320 s on one 2-vCPU host and
    430 s on another): CPUs, model, and the load average before and after."""
    terminalreporter.write_line(
        f"machine: {os.cpu_count()} CPUs ({cpu_model()}); load average "
        f"{config.stash.get(_LOAD_AT_START, '?')} at the start, {load_average()} at the end")
