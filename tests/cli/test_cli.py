"""The command line, end to end with the real Piper engine, and its answers to bad input.
(Run in the test's process: the real parser and handlers; test_cli_pipes.py runs it as a
process, pipes and all.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile

from voxcache.testing.cli import run_cli

pytestmark = pytest.mark.piper
DET = ["--param", "noise_scale=0", "--param", "noise_w_scale=0"]


def voxcache(cache_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = run_cli(args, {**os.environ, "VOXCACHE_DIR": str(cache_dir)})
    if check:
        done.check_returncode()
    return done


def test_synth_twice_second_is_a_hit_with_identical_audio(cache_dir, tmp_path):
    out1, out2 = tmp_path / "1.wav", tmp_path / "2.wav"
    text = "Your order is ready. Please collect it at the counter."
    first = json.loads(voxcache(cache_dir, "synth", text, *DET, "-o", str(out1), "--json").stdout)
    second = json.loads(voxcache(cache_dir, "synth", text, *DET, "-o", str(out2),
                                 "--json").stdout)
    assert (first["cache"], first["tier"]) == ("miss", "engine")
    assert (second["cache"], second["tier"]) == ("hit", "disk")
    assert first["key"] == second["key"] and len(first["key"]) == 64
    assert first["sample_rate"] == 22050 and first["bytes"] > 10_000
    a, rate = soundfile.read(out1, dtype="int16")
    b, _ = soundfile.read(out2, dtype="int16")
    assert rate == 22050 and np.array_equal(a, b) and np.abs(a).max() > 1000  # real speech


def test_piper_default_noise_is_pinned_to_the_first_take(cache_dir):
    text = "Thank you for calling."
    first = json.loads(voxcache(cache_dir, "synth", text, "--json").stdout)
    second = json.loads(voxcache(cache_dir, "synth", text, "--json").stdout)
    assert second["cache"] == "hit" and second["key"] == first["key"]


def test_explain_shows_the_hashed_payload(cache_dir):
    info = json.loads(voxcache(cache_dir, "explain", "  Hello   there ", "--speed", "1",
                               "--json").stdout)
    assert info["payload"]["text"] == "Hello there"
    assert info["payload"]["engine"] == "piper"
    assert info["payload"]["params"]["length_scale"] == 1.0
    assert info["payload"]["model"].startswith("piper-tts-")
    assert info["canonical"] == json.dumps(info["payload"], sort_keys=True,
                                           separators=(",", ":"), ensure_ascii=False)


def test_stats_ls_pin_purge_gc(cache_dir):
    synth = json.loads(voxcache(cache_dir, "synth", "Mind the gap.", "--json").stdout)
    voxcache(cache_dir, "synth", "Mind the gap.")
    stats = json.loads(voxcache(cache_dir, "stats", "--json").stdout)
    assert stats["tiers"]["disk"]["entries"] == 1
    assert stats["counters"]["syntheses"] == 1 and stats["counters"]["hits_disk"] == 1
    rows = json.loads(voxcache(cache_dir, "ls", "--json").stdout)
    assert rows[0]["key"] == synth["key"] and rows[0]["text"] == "Mind the gap."
    voxcache(cache_dir, "pin", synth["key"])
    assert json.loads(voxcache(cache_dir, "ls", "--json").stdout)[0]["pinned"]
    gc = json.loads(voxcache(cache_dir, "gc", "--rebuild-index", "--json").stdout)
    assert gc["entries"] == 1
    assert json.loads(voxcache(cache_dir, "ls", "--json").stdout)[0]["pinned"]
    voxcache(cache_dir, "purge", "--voice", "en_US-joe-medium")
    assert json.loads(voxcache(cache_dir, "stats", "--json").stdout)["tiers"]["disk"][
        "entries"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["synth", ""], "text is empty"),
    (["synth", "x" * 6000], "limit is 5000"),
    (["synth", "hi", "--voice", "nobody"], "unknown voice 'nobody'"),
    (["synth", "hi", "--param", "temperature=1"], "accepts: length_scale"),
    (["synth", "hi", "--param", "noise_scale=9"], "between 0.0 and 2.0"),
    (["synth", "hi", "--speed", "10"], "speed must be between"),
    (["synth", "hi", "--instruct", "whisper"], "does not take instructions"),
    (["synth", "hi", "--language", "fr"], "does not speak language 'fr'"),
    (["synth", "hi", "--param", "oops"], "NAME=VALUE"),
])
def test_bad_input_gets_a_clear_error_and_no_entry(cache_dir, args, message):
    result = voxcache(cache_dir, *args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not list((cache_dir / "objects").rglob("*.wav"))


def test_reference_audio_piper_cannot_use(cache_dir, tmp_path):
    clip = tmp_path / "ref.wav"
    soundfile.write(clip, np.zeros(8000, dtype=np.int16), 16000)
    result = voxcache(cache_dir, "synth", "hi", "--reference", str(clip), check=False)
    assert result.returncode == 2 and "cannot clone" in result.stderr


def test_unusable_cache_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = voxcache(blocker / "cache", "synth", "hi", check=False)
    assert result.returncode == 2
    assert "is not usable" in result.stderr and "--cache-dir" in result.stderr


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_renders_without_caching_and_says_so(tiny_disk):
    cache_dir = tiny_disk / "cache"
    voxcache(cache_dir, "stats")  # creates the folder and index while there is room
    filler = tiny_disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush at close
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    result = voxcache(cache_dir, "synth", "The store will close in fifteen minutes.", "--json",
                      check=False)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["cache"] == "miss" and info["stored"] is False and info["bytes"] > 10_000
    human = voxcache(cache_dir, "synth", "The store will close in fifteen minutes.", check=False)
    assert "served without caching" in human.stdout
    leftovers = [p for p in (cache_dir / "objects").rglob("*") if p.is_file()]
    assert leftovers == []  # no half-written entry, no temp file
