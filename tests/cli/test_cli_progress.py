"""Long commands draw a progress bar on a terminal and nothing anywhere else.

``warm``, ``gc``, ``gc --rebuild-index`` and ``rerender`` run as real processes:
with stderr on a pseudo-terminal they draw bars (the index rebuild counts the
files it verifies); with stderr in a pipe, or with ``--json``, not one bar
character reaches it (rich used to print the last frame of the bar there, a line
of box characters in every cron mail and CI log).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from voxcache.testing import forked
from voxcache.tiers.index import Index
from voxcache.tiers.lifecycle import rebuild_index, reconcile

BAR = "━"  # rich's bar character
PHRASES = ["Good morning.", "The next train leaves at nine.", "Mind the gap."]


def voxcache(cache: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "voxcache.cli", "--cache-dir", str(cache), "--engine", "tone",
            *args]


def environment() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VOXCACHE_", "FORCE_"))}
    return {**clean, "TERM": "xterm-256color", "COLUMNS": "120"}


def on_a_terminal(command: list[str]) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal (stdout in a pipe): (code, stdout, stderr)."""
    leader, follower = pty.openpty()
    proc = forked.popen(command, stdout=subprocess.PIPE, stderr=follower,
                        env=environment(), text=True)
    os.close(follower)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    stdout = proc.stdout.read() if proc.stdout else ""
    return proc.wait(timeout=120), stdout, seen.decode("utf-8", "replace")


def in_a_pipe(command: list[str]) -> subprocess.CompletedProcess[str]:
    return forked.run(command, capture_output=True, text=True, env=environment(),
                      timeout=120)


@pytest.fixture
def phrases(tmp_path: Path) -> Path:
    path = tmp_path / "phrases.json"
    path.write_text(json.dumps(PHRASES))
    return path


LONG_COMMANDS = [("warm", "{phrases}"), ("gc",), ("gc", "--rebuild-index"),
                 ("rerender", "--from-revision", "tone-1")]


@pytest.mark.parametrize("command", LONG_COMMANDS, ids=" ".join)
def test_no_bar_reaches_a_pipe(tmp_path: Path, phrases: Path, command: tuple[str, ...]) -> None:
    cache = tmp_path / "cache"
    assert in_a_pipe(voxcache(cache, "warm", str(phrases))).returncode == 0
    args = [a.format(phrases=phrases) for a in command]
    done = in_a_pipe(voxcache(cache, *args))
    assert done.returncode == 0, done.stderr
    assert BAR not in done.stderr and BAR not in done.stdout, done.stderr


@pytest.mark.parametrize("command", LONG_COMMANDS, ids=" ".join)
def test_json_output_has_no_bar_even_on_a_terminal(tmp_path: Path, phrases: Path,
                                                   command: tuple[str, ...]) -> None:
    cache = tmp_path / "cache"
    assert in_a_pipe(voxcache(cache, "warm", str(phrases))).returncode == 0
    code, stdout, stderr = on_a_terminal(
        voxcache(cache, *[a.format(phrases=phrases) for a in command], "--json"))
    assert code == 0, stderr
    json.loads(stdout)  # one JSON document, nothing else
    assert BAR not in stderr


def test_warm_draws_its_bar_on_a_terminal(tmp_path: Path, phrases: Path) -> None:
    code, stdout, stderr = on_a_terminal(voxcache(tmp_path / "cache", "warm", str(phrases)))
    assert code == 0, stderr
    assert "warming" in stderr and BAR in stderr and "3/3" in stderr
    assert "rendered 3" in stdout


def test_gc_rebuild_index_counts_the_files_it_verifies(tmp_path: Path, phrases: Path) -> None:
    cache = tmp_path / "cache"
    assert in_a_pipe(voxcache(cache, "warm", str(phrases))).returncode == 0
    code, stdout, stderr = on_a_terminal(voxcache(cache, "gc", "--rebuild-index"))
    assert code == 0, stderr
    assert "rebuilding the index" in stderr and "3/3" in stderr and BAR in stderr
    assert "3 rows added" in stdout


def test_the_rebuild_reports_each_verified_file(tmp_path: Path, phrases: Path) -> None:
    """The callback ``gc --rebuild-index`` draws from: (done, total) from 0 to every file,
    in order; an index already in step with the files has nothing to verify."""
    cache = tmp_path / "cache"
    assert in_a_pipe(voxcache(cache, "warm", str(phrases))).returncode == 0
    index = Index(cache / "index.sqlite3")
    try:
        calls: list[tuple[int, int]] = []
        report = rebuild_index(cache, index, lambda done, total: calls.append((done, total)))
        assert report["added"] == 3
        assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
        calls.clear()
        reconcile(cache, index, lambda done, total: calls.append((done, total)))
        assert calls == [(0, 0)]
    finally:
        index.close()


def test_pack_export_and_import_draw_no_bar_in_a_pipe(tmp_path: Path, phrases: Path) -> None:
    """Packs use the same bars: in a pipe (cron, CI) not one bar character."""
    center, edge, key = tmp_path / "center", tmp_path / "edge", tmp_path / "pack.key"
    pack = tmp_path / "phrases.vxpack"
    assert in_a_pipe(voxcache(center, "warm", str(phrases))).returncode == 0
    assert in_a_pipe(voxcache(center, "pack", "keygen", "-o", str(key))).returncode == 0
    for command in (voxcache(center, "pack", "export", "--sign", str(key), "-o", str(pack)),
                    voxcache(edge, "pack", "import", str(pack), "--trust", f"{key}.pub")):
        done = in_a_pipe(command)
        assert done.returncode == 0, done.stderr
        assert BAR not in done.stderr and BAR not in done.stdout, done.stderr
    code, _, stderr = on_a_terminal(
        voxcache(tmp_path / "edge2", "pack", "import", str(pack), "--trust", f"{key}.pub"))
    assert code == 0, stderr
    assert "importing" in stderr and BAR in stderr  # and on a terminal, a bar
