"""Packaging a library's users can live with: ranges in pyproject.toml, the tested set in
constraints.txt, the Python versions declared, a changelog entry for the version, and a
systemd unit that systemd itself accepts and whose command starts a server.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib.metadata
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import voxcache
from voxcache.testing.servers import clean_env, free_port

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
UNIT = ROOT / "docs" / "operating" / "voxcache.service"


def requirements() -> list[Requirement]:
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra, listed in PROJECT["optional-dependencies"].items():
        found += [Requirement(r) for r in listed if extra != "all"]
    return found


def pins() -> dict[str, str]:
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pinned[canonicalize_name(name)] = version.strip()
    return pinned


def test_a_library_asks_for_ranges_and_the_tested_pins_are_inside_them() -> None:
    pinned = pins()
    for requirement in requirements():
        specifiers = list(requirement.specifier)
        assert specifiers, f"{requirement} has no version range"
        assert not any(s.operator in ("==", "===") for s in specifiers), (
            f"{requirement}: an exact pin belongs in constraints.txt")
        assert any(s.operator == "<" for s in specifiers), f"{requirement}: no upper bound"
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside {requirement.specifier}")


def test_the_tested_set_is_the_pinned_set() -> None:
    """What the tests run with (this virtualenv, made by setup.sh with -c constraints.txt)
    is what constraints.txt says, package for package."""
    pinned = pins()
    wanted = _closure({"all", "test"})
    assert wanted - set(pinned) == set(), "installed but not pinned"
    for name in wanted:
        installed = importlib.metadata.version(name).split("+")[0]  # torch's +cpu
        assert installed == pinned[name], f"{name}: installed {installed}, pinned {pinned[name]}"


def _closure(extras: set[str]) -> set[str]:
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        todo += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    while todo:
        requirement = todo.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen or key[0] == "voxcache":
            if key[0] == "voxcache":  # voxcache[...] inside 'all'
                todo += [Requirement(r) for e in requirement.extras
                         for r in PROJECT["optional-dependencies"][e]]
            seen.add(key)
            continue
        seen.add(key)
        for line in importlib.metadata.requires(requirement.name) or []:
            nested = Requirement(line)
            wanted_by = requirement.extras or {""}
            if nested.marker is None or any(nested.marker.evaluate({"extra": e})
                                             for e in wanted_by):
                todo.append(nested)
    return {name for name, _ in seen if name != "voxcache"}


def test_python_3_11_to_3_13_are_declared() -> None:
    assert SpecifierSet(PROJECT["requires-python"]).contains("3.11")
    assert all(SpecifierSet(PROJECT["requires-python"]).contains(v) for v in ("3.12", "3.13"))
    declared = {c.rsplit(":: ", 1)[1] for c in PROJECT["classifiers"]
                if c.startswith("Programming Language :: Python :: 3.")}
    assert declared == {"3.11", "3.12", "3.13"}
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in declared


PYTHONS = ("3.12", "3.13")


def _resolutions(python: str, folder: Path) -> tuple[subprocess.CompletedProcess[str],
                                                      subprocess.CompletedProcess[str]]:
    """uv's resolution of every listed requirement for ``python`` at the pinned versions,
    wheels only (``name==version`` lines), then resemblyzer and webrtcvad-wheels alone.
    uv, not pip: the same resolution (checked side by side: 172 packages, the same
    versions), at under 1 CPU-second per Python where pip's took ~20 of a suite short of
    CPU; and like pip it checks each wheel's tags against that Python."""
    from uv import find_uv_bin

    listed = [str(r) for r in requirements() if r.name != "resemblyzer"]
    (folder / "requirements.txt").write_text("\n".join(listed) + "\n")
    common = [find_uv_bin(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
              "--python-version", python, "--only-binary", ":all:",
              "-c", str(ROOT / "constraints.txt")]
    (folder / "alone.txt").write_text("resemblyzer\nwebrtcvad-wheels\n")
    result = subprocess.run([*common, str(folder / "requirements.txt")], capture_output=True,
                            text=True, timeout=600)
    alone = subprocess.run([*common, "--no-deps", str(folder / "alone.txt")],
                           capture_output=True, text=True, timeout=300)
    return result, alone


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Any]]]:
    """Both Pythons' resolutions at once (they mostly wait on the index: run side by side
    they take the time of one)."""
    with ThreadPoolExecutor(len(PYTHONS)) as pool:
        yield {python: pool.submit(_resolutions, python, tmp_path_factory.mktemp(python))
               for python in PYTHONS}


def _chosen(resolved: str) -> dict[str, str]:
    """The ``name==version`` lines of a resolution, by canonical name."""
    pairs = (line.split("==", 1) for line in resolved.splitlines() if "==" in line)
    return {canonicalize_name(name): version.strip() for name, version in pairs}


@pytest.mark.slow
@pytest.mark.parametrize("python", PYTHONS)
def test_the_pinned_set_installs_as_wheels_on_python(python: str,
                                                     resolutions: dict[str, Future[Any]]
                                                     ) -> None:
    """Only 3.11 runs here; for 3.12 and 3.13 every extra's dependencies resolve at the
    pinned versions to wheels for that Python (metadata only: nothing is installed).
    resemblyzer is checked without its dependencies: it names webrtcvad, a source-only
    package whose module webrtcvad-wheels (checked) provides."""
    result, alone = resolutions[python].result()
    assert result.returncode == 0, result.stderr[-3000:]
    chosen = _chosen(result.stdout)
    assert len(chosen) > 100, result.stdout[-3000:]  # the whole set, not an empty answer
    pinned = pins()
    assert all(pinned.get(name, version) == version.split("+")[0]
               for name, version in chosen.items())
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert set(_chosen(alone.stdout)) == {"resemblyzer", "webrtcvad-wheels"}


def test_the_changelog_says_what_this_version_changed() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, re.MULTILINE)
    assert versions and versions[0] == voxcache.__version__, versions
    section = changelog.split(f"## {voxcache.__version__}", 1)[1].split("\n## ", 1)[0]
    assert section.count("\n- ") >= 3
    result = subprocess.run([sys.executable, "-m", "voxcache", "--version"],
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == f"voxcache {voxcache.__version__}"


needs_systemd = pytest.mark.skipif(not shutil.which("systemd-analyze"),
                                   reason="needs systemd-analyze (Debian's systemd)")


def _unit_with(path: Path, executable: str) -> Path:
    text = UNIT.read_text(encoding="utf-8").replace("/opt/voxcache/bin/voxcache", executable)
    path.write_text(text, encoding="utf-8")
    return path


@needs_systemd
def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    """``systemd-analyze verify`` with the unit's program where this machine has it; the
    unit as shipped names /opt/voxcache/bin/voxcache, which verify insists exists (so it
    is a real check: shown by the unit failing it here, where that path does not)."""
    shipped = tmp_path / "shipped" / "voxcache.service"
    shipped.parent.mkdir()
    shutil.copy(UNIT, shipped)
    refused = subprocess.run(["systemd-analyze", "verify", str(shipped)], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode != 0 and "/opt/voxcache/bin/voxcache" in refused.stderr
    voxcache_bin = shutil.which("voxcache", path=str(Path(sys.executable).parent))
    assert voxcache_bin, "the voxcache script beside this Python"
    unit = _unit_with(tmp_path / "voxcache.service", voxcache_bin)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "voxcache.service" not in result.stderr, result.stderr  # not one warning about it


def test_the_units_command_starts_a_server_and_stops_on_its_kill_signal(tmp_path: Path) -> None:
    """The unit's ExecStart, run with a config that has the API keys ``--host 0.0.0.0``
    needs (the paths and port swapped for this test's), and stopped with its KillSignal."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text(encoding="utf-8"))
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    config = tmp_path / "voxcache.toml"
    config.write_text('engine = "tone"\n[tenants.default]\napi_keys = ["a-key-for-systemd"]\n')
    port = free_port()
    swap = {"/etc/voxcache/voxcache.toml": str(config),
            "/var/cache/voxcache": str(tmp_path / "cache"), "8000": str(port)}
    argv = [sys.executable, "-m", "voxcache", *(swap.get(a, a) for a in argv[1:])]
    env = clean_env()
    env.update(dict(e.split("=", 1) for e in service["Environment"].split()))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert httpx.post(f"http://127.0.0.1:{port}/v1/audio/speech",
                          json={"input": "Hello."}, timeout=60).status_code == 401
    finally:
        proc.send_signal(getattr(signal, service["KillSignal"]))
        _, err = proc.communicate(timeout=int(service["TimeoutStopSec"]))
    messages = [json.loads(line)["message"] for line in err.splitlines()]  # JSON, as set
    assert sum(m.startswith("stopped (SIGTERM)") for m in messages) == 2, messages  # 2 workers
