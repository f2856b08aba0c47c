"""The benchmark suite still runs: every benchmark ran and produced figures.

No wall-clock thresholds here — the machines are shared and noisy; the suite's job is to
produce numbers, and this test's job is to notice when it stops producing them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPECTED = ("lookup", "inline", "keycost", "misses", "stampede", "hitratio", "scale", "http",
            "remote_tiers", "cluster")
TABLES_ONLY = ("remote_tiers", "cluster")
"""Benchmarks whose figures are tables alone (a handful of rows each)."""


def _has_peers() -> bool:
    try:
        import diskcache  # noqa: F401
        import matplotlib  # noqa: F401
        import tts_cache  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_peers(), reason="needs the [bench] extra")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--repeat", "2", "--out",
                           str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    data["_out"] = out
    data["_md"] = (out / "results.md").read_text()
    return data


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_benchmark_ran_and_produced_figures(quick_run: dict) -> None:
    tables = quick_run["tables"]
    for name in EXPECTED:
        if name == "http" and not (shutil.which("wrk") and shutil.which("nginx")):
            assert quick_run["notes"].get("http"), "http skipped without saying why"
            continue
        if name == "misses" and not _has_piper():
            continue
        mine = [t for t in tables if t["bench"] == name]
        assert mine, f"{name} produced no table"
        for table in mine:
            assert table["rows"], f"{name}/{table['name']} has no rows"
        assert not any("FAILED" in n for n in quick_run["notes"].get(name, [])), name
        plots = [p for p in quick_run["plots"] if p["bench"] == name]
        assert plots or name in TABLES_ONLY, f"{name} drew no plot"
        for plot in plots:
            png = quick_run["_out"] / plot["file"]
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_figures_are_numbers_with_medians_and_tails(quick_run: dict) -> None:
    lookup = next(t for t in quick_run["tables"] if t["name"] == "lookup")
    for row in lookup["rows"]:
        assert row["median_us"] > 0 and row["p99_us"] >= row["median_us"]
        assert row["n"] >= 10
    assert quick_run["headline"], "no headline ratios"
    for item in quick_run["headline"].values():
        assert isinstance(item["value"], float) and not math.isnan(item["value"])
    interleaved = [i for i in quick_run["headline"].values() if "rounds" in i]
    assert interleaved, "no headline ratio was measured as interleaved trials"
    for item in interleaved:  # each round a ratio, the median between the extremes
        assert item["rounds"] and item["min"] <= item["value"] <= item["max"]
    assert any(len(item["rounds"]) == 2 for item in interleaved), "--repeat 2 was not obeyed"
    assert "| stable ±5 % |" in quick_run["_md"] and "load average at the start" in quick_run["_md"]
    assert "| subject |" in quick_run["_md"] or "subject" in quick_run["_md"]
    stampede = next(t for t in quick_run["tables"] if t["name"] == "stampede")
    vox = [r for r in stampede["rows"] if r["cache"] == "voxcache"]
    assert vox and all(r["renders (max of trials)"] >= 1 for r in vox)
    confirm = next(t for t in quick_run["tables"] if t["name"] == "confirm")
    assert all(0 <= r["real Cache hit ratio"] <= 1 for r in confirm["rows"])


def _has_piper() -> bool:
    try:
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


def test_voxcache_bench_command_runs_the_suite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", "import sys; from voxcache.cli import main; "
                           "sys.exit(main())", "bench", "--quick", "--only", "keycost",
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert [t["bench"] for t in data["tables"]] == ["keycost"]


def test_unknown_benchmark_is_refused() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "unknown benchmark" in proc.stderr
