"""The command line in a pipe: whole rows, a quiet exit when the reader leaves, logs that
say only what was asked for, sizes for people.

Every command runs as a real process, its stdout a pipe (or, to compare, a
pseudo-terminal), as ``voxcache ls | grep …`` or ``voxcache ls --json | head`` would.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.entry import audio_entry
from voxcache.testing import forked
from voxcache.testing.servers import free_port

LONG_TEXT = ("Your order is ready at the counter on the second floor, next to the escalators "
             "and the flower shop; please bring your receipt.\tThank you.")
LONG_VOICE = "audiobook-narrator-with-a-long-name"


def environment(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("VOXCACHE_", "FORCE_", "COLUMNS", "AWS_"))}
    return {**clean, **extra}


def command(cache_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "voxcache", "--cache-dir", str(cache_dir), "--engine", "tone",
            *args]


def piped(cache_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return forked.run(command(cache_dir, *args), capture_output=True, text=True,
                      timeout=120, env=environment(**env))


def on_a_terminal(cache_dir: Path, *args: str) -> str:
    """stdout on an 80-column pseudo-terminal: what a person sees."""
    leader, follower = pty.openpty()
    proc = forked.popen(command(cache_dir, *args), stdout=follower, stderr=subprocess.PIPE,
                        env=environment(TERM="xterm", COLUMNS="80"))
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
    assert proc.wait(timeout=60) == 0
    return re.sub(r"\x1b\[[0-9;]*m", "", seen.decode()).replace("\r\n", "\n")


def plant(cache_dir: Path, count: int, text: str = LONG_TEXT, model: str = "tone-1") -> None:
    cache = Cache(cache_dir)
    try:
        for i in range(count):
            pcm = (np.sin(np.arange(800) * 0.01 * (i + 1)) * 8000).astype("<i2").tobytes()
            key = f"{i:08x}".ljust(64, "a")
            assert cache.put(audio_entry(key, Audio(pcm, 16000), meta={
                "engine": "tone", "model": model, "voice": LONG_VOICE,
                "text": f"{text} ({i})", "tenant": "default"}))
    finally:
        cache.close()


def test_ls_in_a_pipe_prints_whole_rows_as_tsv(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    plant(cache_dir, 3)
    result = piped(cache_dir, "ls")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split("\t") == ["key", "kind", "bytes", "hits", "pin", "voice", "text"]
    assert len(rows) == 3
    for row in rows:
        key, kind, size, hits, pin, voice, text = row.split("\t")
        assert kind == "audio" and int(size) > 1000 and voice == LONG_VOICE
        # the whole text, its tab escaped (a tab inside a field would shift the columns)
        assert text.startswith(LONG_TEXT.replace("\t", "\\t")), text
    assert "…" not in result.stdout


def test_ls_on_a_terminal_is_a_table_cut_to_the_screen(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    plant(cache_dir, 2)
    shown = on_a_terminal(cache_dir, "ls")
    assert "\t" not in shown and "…" in shown
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert re.search(r"\d+(\.\d)? KiB", shown)  # sizes for people


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "PYTHONUNBUFFERED"])
def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path: Path,
                                                             unbuffered: str) -> None:
    """``voxcache ls --json | head -c 100``: more output than a pipe holds, the reader gone
    after 100 bytes: no BrokenPipeError traceback, the shell's SIGPIPE status."""
    cache_dir = tmp_path / "cache"
    plant(cache_dir, 800)  # ~200 KB, over the 64 KB a pipe buffers
    env = {k: v for k, v in environment().items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    for args in (("ls", "--json", "--limit", "800"), ("ls", "--limit", "800")):
        proc = forked.popen(command(cache_dir, *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(100)
        proc.stdout.close()
        code = proc.wait(timeout=60)
        err = proc.stderr.read().decode()
        assert first and code == 141, (args, code, err)
        assert err == "", err  # not one line: no traceback, no "Exception ignored"


def test_verbose_turns_on_voxcaches_loggers_and_no_librarys(tmp_path: Path) -> None:
    """With an S3 tier boto3 is loaded; ``-v`` used to set the root logger to DEBUG and
    print hundreds of botocore lines."""
    config = tmp_path / "voxcache.toml"
    config.write_text('tiers = ["memory", "disk", "s3://bucket/prefix"]\n')
    aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}", "AWS_ACCESS_KEY_ID": "a",
           "AWS_SECRET_ACCESS_KEY": "b", "AWS_REGION": "us-east-1"}
    result = piped(tmp_path / "cache", "--config", str(config), "-v", "synth", "Hello.", **aws)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any("DEBUG voxcache.cli: settings: cache folder" in line for line in lines), lines
    assert not [line for line in lines if "botocore" in line or "urllib3" in line]
    quiet = piped(tmp_path / "cache", "--config", str(config), "synth", "Hello.", **aws)
    assert "DEBUG" not in quiet.stderr


def test_stats_lists_revisions_and_prints_sizes_for_people(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    plant(cache_dir, 2, model="tone-0")
    assert piped(cache_dir, "synth", "Mind the gap.").returncode == 0  # tone-1, the current
    result = piped(cache_dir, "stats")
    assert result.returncode == 0, result.stderr
    assert re.search(r"3 entries, \d+(\.\d)? KiB \(cap 5 GiB\)", result.stdout), result.stdout
    assert "5368709120" not in result.stdout
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    header = rows.index(["model revision", "requests asked", "takes stored"])
    assert rows[header + 1:header + 3] == [["tone-0", "0", "2"], ["tone-1", "1", "1"]]
    data = json.loads(piped(cache_dir, "stats", "--json").stdout)
    assert data["revisions"]["tone-0"]["stored"] == 2
    assert data["tiers"]["disk"]["max_bytes"] == 5 * 2**30  # JSON keeps the number
    # what rerender --help points at is there: a revision from stats is accepted
    again = piped(cache_dir, "rerender", "--from-revision", "tone-0", "--json")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("size, shown", [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"),
                                         (1536, "1.5 KiB"), (64 * 2**20, "64 MiB"),
                                         (5 * 2**30, "5 GiB"), (150 * 2**30, "150 GiB")])
def test_human_sizes(size: int, shown: str) -> None:
    from voxcache.cli.output import human_size

    assert human_size(size) == shown
