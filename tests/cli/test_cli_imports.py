"""A command line run imports what it uses: the suite and every operator's script start
`voxcache` hundreds of times, and each module imported for nothing is paid on each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

NOT_IMPORTED = ("importlib.metadata", "voxcache.policies.admit.classes")
"""importlib.metadata (~10 ms, then a scan of every installed distribution) is for plugins
a run names; the text classes (~15 ms of expressions) for a cache that refuses some."""
RUN = """
import json, sys
from voxcache.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def modules_after(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True,
                          timeout=60, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0, done.stderr
    return set(result["modules"])


@pytest.mark.parametrize("argv", [("stats",), ("--engine", "tone", "synth", "Hello there.",
                                               "-o", "{folder}/hello.wav")])
def test_a_plain_run_imports_no_plugin_machinery_and_no_text_classes(tmp_path: Path,
                                                                     argv: tuple[str, ...]):
    loaded = modules_after("--cache-dir", str(tmp_path / "cache"),
                           *(arg.format(folder=tmp_path) for arg in argv))
    assert "voxcache.cache" in loaded  # it did open the cache
    assert not loaded & set(NOT_IMPORTED), loaded & set(NOT_IMPORTED)


def test_a_cache_that_refuses_a_class_of_text_imports_its_detectors(tmp_path: Path) -> None:
    config = tmp_path / "voxcache.toml"
    config.write_text('[admission]\nnever_store = ["email"]\n')
    loaded = modules_after("--cache-dir", str(tmp_path / "cache"), "--config", str(config),
                           "--engine", "tone", "synth", "Write to me at a@b.example.",
                           "-o", str(tmp_path / "out.wav"))
    assert "voxcache.policies.admit.classes" in loaded
