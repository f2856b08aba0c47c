"""The README's first steps, as a newcomer types them: ``bash scripts/run.sh``, the curl,
then ``. .venv/bin/activate`` and ``voxcache stats``, which must count the take the
service just stored (the service and the command line share one default folder).

The scripts run for real in a copy of the repository; only the virtualenv's Python is a
stand-in that records what ``setup.sh`` asks pip for (installing would take minutes and
the network), and its ``voxcache`` runs this checkout's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from voxcache.testing.servers import clean_env, free_port

ROOT = Path(__file__).resolve().parents[1]


def clone(tmp_path: Path) -> Path:
    tree = tmp_path / "clone"
    (tree / "scripts").mkdir(parents=True)
    for name in ("run.sh", "setup.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    for name in ("pyproject.toml", "constraints.txt"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, tree / name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tree / ".venv")],
                   check=True)
    python = tree / ".venv" / "bin" / "python"
    python.unlink()
    python.write_text(f'#!/bin/sh\necho "$@" >> "{tree}/pip.log"\n')
    (tree / ".venv" / "bin" / "voxcache").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m voxcache "$@"\n')
    for name in ("python", "voxcache"):
        (tree / ".venv" / "bin" / name).chmod(0o755)
    return tree


def test_run_sh_installs_lean_and_serves_the_folder_voxcache_stats_reads(tmp_path) -> None:
    tree = clone(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VOXCACHE_", "XDG_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), VOXCACHE_ENGINE="tone")  # the tone engine: a faster start
    port = free_port()
    proc = subprocess.Popen(["bash", "scripts/run.sh", "--port", str(port)], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.post(f"http://127.0.0.1:{port}/v1/audio/speech", json={
                    "input": "Your order is ready.", "response_format": "wav"}, timeout=10)
                break
            assert time.monotonic() < deadline, "run.sh did not serve"
            time.sleep(0.1)
        assert answer.status_code == 200 and answer.headers["x-cache"] == "MISS"
        stats = subprocess.run(["bash", "-c", ". .venv/bin/activate && voxcache stats --json"],
                               cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["root"] == str(home / ".cache" / "voxcache")
    assert data["tiers"]["disk"]["entries"] >= 1, "voxcache stats sees what was served"
    assert ".venv/bin/voxcache ('. .venv/bin/activate' puts it on PATH)" in output

    asked = (tree / "pip.log").read_text().splitlines()
    install = [line for line in asked if line.startswith("-m pip install") and " -e " in line]
    assert install == ["-m pip install -q -c constraints.txt -e .[piper,service]"], asked


def test_every_extra_when_asked(tmp_path) -> None:
    tree = clone(tmp_path)
    env = clean_env()
    result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tree, timeout=60,
                            env={**env, "VOXCACHE_EXTRAS": "all"}, capture_output=True)
    assert result.returncode == 0, result.stderr
    asked = (tree / "pip.log").read_text().splitlines()
    assert "-m pip install -q -c constraints.txt -e .[all]" in asked
