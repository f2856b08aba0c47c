"""The in-process CLI runner (voxcache.testing.cli) answers what a ``voxcache`` process
answers: exit code, stdout and stderr, refusals included, in the environment a process
would have been given, which it leaves as it found it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from voxcache.testing.cli import run_cli
from voxcache.testing.servers import clean_env

CASES = {
    "a JSON answer": ["--engine", "tone", "explain", "Hello there", "--json"],
    "a refused engine": ["--engine", "nope", "explain", "Hello"],
    "argparse's refusal": ["--engine", "tone", "explain", "Hello", "--speed", "nope"],
}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_the_runner_answers_what_the_process_answers(tmp_path: Path, argv: list[str]) -> None:
    args = ["--cache-dir", str(tmp_path / "cache"), *argv]
    env = clean_env()
    env["COLUMNS"] = "100"  # argparse wraps its usage lines to the terminal's width
    process = subprocess.run([sys.executable, "-m", "voxcache", *args], capture_output=True,
                             text=True, timeout=60, env=env)
    inside = run_cli(args, env)
    assert (inside.returncode, inside.stdout, inside.stderr) == (
        process.returncode, process.stdout, process.stderr)


def test_the_environment_is_the_given_one_and_is_restored(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("VOXCACHE_DIR", str(tmp_path / "the developer's own"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # where the default folder goes
    before = dict(os.environ)
    done = run_cli(["stats", "--json"], {**before, "VOXCACHE_DIR": str(tmp_path / "given")})
    assert done.returncode == 0, done.stderr
    assert '"root": "' + str(tmp_path / "given") + '"' in done.stdout
    assert dict(os.environ) == before
    unset = run_cli(["stats", "--json"])  # no env given: VOXCACHE_* are not passed on
    assert unset.returncode == 0, unset.stderr
    assert '"root": "' + str(tmp_path / "home" / ".cache" / "voxcache") + '"' in unset.stdout
    assert dict(os.environ) == before


def test_log_lines_reach_stderr_and_the_logger_is_put_back(tmp_path: Path) -> None:
    logger = logging.getLogger("voxcache")
    handlers, level = list(logger.handlers), logger.level
    done = run_cli(["-v", "--cache-dir", str(tmp_path), "--engine", "tone", "stats"])
    assert done.returncode == 0, done.stderr
    assert " DEBUG voxcache.cli: settings: cache folder " in done.stderr
    assert (logger.handlers, logger.level) == (handlers, level)
