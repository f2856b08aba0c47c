"""``bench.helpers.machine``: every report names the host it was measured on, the test
suite's own summary included."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from bench.helpers.machine import cpu_model, load_average
from voxcache.testing import forked

REPO = Path(__file__).resolve().parent.parent
FIGURES = r"\d+\.\d\d \d+\.\d\d \d+\.\d\d"


def test_a_test_run_ends_by_naming_its_machine_and_load() -> None:
    result = forked.run([sys.executable, "-c",
                         "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))", "-q",
                         "-p", "no:cacheprovider",
                         "tests/test_bench_trials.py::test_rounds_flip_the_order_and_drop_the_warmup"],
                        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("machine: ")]
    assert len(lines) == 1, result.stdout[-2000:]
    assert lines[0].startswith(f"machine: {os.cpu_count()} CPUs ({cpu_model()}); ")
    assert re.search(f"load average {FIGURES} at the start, {FIGURES} at the end$", lines[0])


def test_the_model_is_read_from_cpuinfo_and_unknown_without_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if Path("/proc/cpuinfo").exists():
        first = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
        assert cpu_model() == first.split(":", 1)[1].strip()
    real = Path.read_text

    def unreadable(path: Path, *args: object, **kwargs: object) -> str:
        if str(path) == "/proc/cpuinfo":
            raise PermissionError(path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", unreadable)
    monkeypatch.setattr("platform.processor", lambda: "")
    assert cpu_model() == "unknown"
    assert re.fullmatch(FIGURES, load_average())
