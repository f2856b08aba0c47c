"""Engines as plugins: a third-party engine through every door voxcache has.

The plugin (``tests/plugins/voxcache-styletone``, installed in the test environment as its
own distribution) is named only as its entry point ``styletone`` — or as
``voxcache_styletone:StyleToneEngine`` — and must work with ``voxcache serve --workers 2``
and every CLI command, take its options from the config, and fail clearly when broken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from voxcache.engines import installed, load_engine
from voxcache.errors import EngineLoadError, InvalidParameter
from voxcache.testing.cli import run_cli
from voxcache.testing.servers import clean_env

TEXT = "The plugin speaks this sentence. And then this one!"


def cli(cache: Path, *args: str, engine: str = "styletone", env: dict[str, str] | None = None,
        config: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``voxcache`` in this process, or in its own where ``env`` is given (a PYTHONPATH
    that adds a plugin is a process's)."""
    command = ["--cache-dir", str(cache), "--engine", engine]
    if config is not None:
        command += ["--config", str(config)]
    if not env:
        return run_cli([*command, *args])
    clean = clean_env()
    return subprocess.run([sys.executable, "-m", "voxcache", *command, *args],
                          capture_output=True, text=True, timeout=120, env={**clean, **env})


def test_installed_engines_are_listed_with_their_distribution() -> None:
    names = {e.name: e for e in installed()}
    assert {"piper", "tone", "styletone"} <= set(names)
    assert names["styletone"].target == "voxcache_styletone:StyleToneEngine"
    assert names["styletone"].distribution.startswith("voxcache-styletone ")
    assert names["tone"].distribution.startswith("voxcache ")  # built-ins register the same way
    done = subprocess.run([sys.executable, "-m", "voxcache", "engines", "--check", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    listed = {row["name"]: row for row in json.loads(done.stdout)["engines"]}
    assert listed["styletone"]["loads"] == "yes"


def test_a_plugin_that_fails_to_import_is_a_clear_error(tmp_path: Path) -> None:
    """A distribution whose entry point names a module that raises on import: every command
    says which plugin, from which distribution, and the import error — exit 2, no traceback."""
    site = tmp_path / "site"
    dist = site / "broken_engine-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-engine\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[voxcache.engines]\nbroken = broken_engine:Engine\n")
    (site / "broken_engine.py").write_text("import numpy_that_is_not_installed\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    done = cli(tmp_path / "c", "synth", "Hello.", "-o", str(tmp_path / "x.wav"),
               engine="broken", env=env)
    assert done.returncode == 2
    assert "engine plugin 'broken' (broken_engine:Engine from broken-engine 0.1) could not " \
           "be imported: ModuleNotFoundError: No module named 'numpy_that_is_not_installed'" \
           in done.stderr
    assert "Traceback" not in done.stderr
    listed = subprocess.run([sys.executable, "-m", "voxcache", "engines", "--check"],
                            capture_output=True, text=True, env={**os.environ, **env},
                            timeout=60)
    assert listed.returncode == 1 and "broken" in listed.stdout and "no:" in listed.stdout
    with pytest.raises(EngineLoadError, match="no_such_module"):
        load_engine("no_such_module:Engine")
    with pytest.raises(InvalidParameter, match="unknown engine 'nope'.*styletone"):
        load_engine("nope")


def test_options_come_from_the_config_and_unknown_ones_are_refused(tmp_path: Path) -> None:
    from voxcache_styletone import default_voices

    voices = tmp_path / "voices.json"
    table = default_voices()
    table["aria"][3] += 0.5
    voices.write_text(json.dumps(table))
    config = tmp_path / "voxcache.toml"
    config.write_text(f'engine = "styletone"\n[engine_options]\nvoices = "{voices}"\n')
    explained = cli(tmp_path / "c", "explain", TEXT, "--json", config=config)
    assert explained.returncode == 0, explained.stderr
    model = json.loads(explained.stdout)["payload"]["model"]
    assert model == load_engine("styletone", voices=str(voices)).model_revision
    assert model != load_engine("styletone").model_revision
    bad = tmp_path / "bad.toml"
    bad.write_text('[engine_options]\ncolour = "blue"\n')
    refused = cli(tmp_path / "c", "explain", TEXT, config=bad)
    assert refused.returncode == 2
    assert "engine 'styletone' takes no option(s) colour; it takes: voices" in refused.stderr
    by_class = cli(tmp_path / "c", "explain", TEXT, "--json",
                   engine="voxcache_styletone:StyleToneEngine")
    assert by_class.returncode == 0 and json.loads(by_class.stdout)["payload"]["engine"] == \
        "styletone"


def test_every_cli_command_renders_and_manages_with_the_plugin(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = tmp_path / "take.wav"
    first = cli(cache, "synth", TEXT, "--seed", "5", "-o", str(out), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["cache"] == "miss" and out.stat().st_size > 1000
    again = cli(cache, "synth", TEXT, "--seed", "5", "-o", str(out), "--json")
    assert json.loads(again.stdout)["cache"] == "hit"
    key = json.loads(first.stdout)["key"]
    assert json.loads(cli(cache, "explain", "--key", key, "--json").stdout)["key"] == key
    phrases = tmp_path / "phrases.json"
    phrases.write_text(json.dumps(["Warm this one.", "And this one too."]))
    warmed = cli(cache, "warm", str(phrases), "--json")
    assert warmed.returncode == 0, warmed.stderr
    listed = cli(cache, "ls", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) >= 3
    assert cli(cache, "pin", key[:12]).returncode == 0
    assert cli(cache, "unpin", key[:12]).returncode == 0
    stats = json.loads(cli(cache, "stats", "--json").stdout)
    assert stats["tiers"]["disk"]["entries"] >= 3
    purged = cli(cache, "purge", "--voice", "aria", "--json")
    assert purged.returncode == 0, purged.stderr
    assert json.loads(purged.stdout)["deleted"] >= 1  # aria is the plugin's default voice
    revisions = cli(cache, "rerender", "--from-revision", "styletone-0", "--json")
    assert revisions.returncode == 1 and "styletone-1.0.0+" in revisions.stdout + \
        revisions.stderr  # names the revisions the cache knows: the plugin's
    assert cli(cache, "gc").returncode == 0


def _safetensors(array: np.ndarray) -> bytes:
    from safetensors.numpy import save

    return save({"style": array})


def _serve(cache: Path, *args: str, engine: str = "styletone") -> Any:
    from voxcache.testing.servers import free_port

    port = free_port()
    clean = clean_env()
    process = subprocess.Popen(
        [sys.executable, "-m", "voxcache", "--cache-dir", str(cache), "--engine", engine,
         "serve", "--port", str(port), *args], env=clean, stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert process.poll() is None, "voxcache serve exited"
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return url, process
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "voxcache serve did not become ready"
        time.sleep(0.1)


def test_a_tensor_voice_uploaded_through_one_worker_serves_through_the_other(
        tmp_path: Path) -> None:
    url, process = _serve(tmp_path / "cache", "--workers", "2")
    try:
        style = np.random.default_rng(7).normal(size=256).astype("float32")
        made = httpx.post(f"{url}/v1/voices", files={"file": ("s.safetensors",
                                                               _safetensors(style))},
                          data={"name": "my style"}, timeout=30)
        assert made.status_code == 201, made.text
        voice = made.json()["id"]
        same = httpx.post(f"{url}/v1/voices", files={"file": (
            "again.safetensors", _safetensors(style.astype("float64")))}, timeout=30)
        assert same.status_code == 200 and same.json()["id"] == voice  # one tensor, one voice
        changed = style.copy()
        changed[1] += 0.5  # a value the engine hears
        other = httpx.post(f"{url}/v1/voices", files={"file": (
            "c.safetensors", _safetensors(changed))}, timeout=30).json()["id"]
        assert other != voice
        before = _served_per_worker(url)
        takes: set[bytes] = set()
        deadline = time.monotonic() + 60
        while True:  # until the kernel has handed both workers some of the connections
            takes |= _speak_at_once(url, voice, 8)
            after = _served_per_worker(url)  # the dashboard counts each worker's requests
            grew = [pid for pid, n in after.items() if n > before.get(pid, 0)]
            if len(grew) == 2:
                break
            assert time.monotonic() < deadline, f"one worker served everything: {after}"
            time.sleep(0.5)
        assert len(takes) == 1
        with httpx.Client(timeout=60) as client:
            changed_take = client.post(f"{url}/v1/audio/speech", json={
                "input": TEXT, "voice": other, "response_format": "wav", "seed": 1})
        assert changed_take.content not in takes
    finally:
        process.terminate()
        process.wait(30)


def _speak_at_once(url: str, voice: str, count: int) -> set[bytes]:
    """``count`` requests for one take at once, each on its own connection: requests one
    after another all went to one worker on a loaded host (the first awake accepts), a
    burst reaches both. Returns the takes heard."""
    def one(_: int) -> bytes:
        with httpx.Client(timeout=60) as client:
            answer = client.post(f"{url}/v1/audio/speech", json={
                "input": TEXT, "voice": voice, "response_format": "wav", "seed": 1})
        assert answer.status_code == 200, answer.text
        return answer.content

    with ThreadPoolExecutor(count) as pool:
        return set(pool.map(one, range(count)))


def _served_per_worker(url: str) -> dict[int, int]:
    workers = httpx.get(f"{url}/v1/dashboard", timeout=10).json()["service"]["workers"]
    return {w["pid"]: w["requests"] for w in workers}


def test_an_engine_without_tensor_voices_refuses_one_with_a_400(tmp_path: Path) -> None:
    url, process = _serve(tmp_path / "cache", engine="tone")
    try:
        refused = httpx.post(f"{url}/v1/voices", files={"file": (
            "s.safetensors", _safetensors(np.zeros(256, dtype="float32")))}, timeout=30)
        assert refused.status_code == 400
        assert "takes no tensor voices" in refused.text
    finally:
        process.terminate()
        process.wait(30)


def test_a_tensor_voice_is_keyed_by_its_content_in_the_library(tmp_path: Path) -> None:
    from voxcache import Cache, CachedEngine, SynthesisRequest
    from voxcache.engines.tone import ToneEngine
    from voxcache.errors import UnsupportedFeature

    cache = Cache(tmp_path / "c")
    cached = CachedEngine(load_engine("styletone"), cache)
    style = np.random.default_rng(3).normal(size=256).astype("float32")
    first = cached.synthesize(SynthesisRequest(TEXT, voice_tensor=style, seed=2))
    copy = cached.synthesize(SynthesisRequest(TEXT, voice_tensor=style.astype(">f4"), seed=2))
    assert (first.cache, copy.cache, copy.key) == ("miss", "hit", first.key)
    changed = style.copy()
    changed[0] = np.nextafter(changed[0], np.float32(10))  # the smallest change there is
    moved = cached.synthesize(SynthesisRequest(TEXT, voice_tensor=changed, seed=2))
    assert moved.cache == "miss" and moved.key != first.key
    assert moved.audio.pcm != first.audio.pcm
    for bad, message in ((np.zeros(255, "float32"), "shape"), (np.full(256, np.nan), "finite"),
                         (np.zeros(256, "int32"), "float32")):
        with pytest.raises(InvalidParameter, match=message):
            cached.resolve(SynthesisRequest(TEXT, voice_tensor=bad))
    with pytest.raises(InvalidParameter, match="one voice"):
        cached.resolve(SynthesisRequest(TEXT, voice="aria", voice_tensor=style))
    with pytest.raises(UnsupportedFeature, match="takes no tensor voices"):
        CachedEngine(ToneEngine(), cache).resolve(SynthesisRequest(TEXT, voice_tensor=style))
    torch = pytest.importorskip("torch")
    as_torch = cached.synthesize(SynthesisRequest(TEXT, voice_tensor=torch.tensor(style),
                                                  seed=2))
    assert (as_torch.cache, as_torch.key) == ("hit", first.key)
    cache.close()


SCRIPT = textwrap.dedent("""
    import sys
    from voxcache.engines import load_engine
    print(load_engine(sys.argv[1]).model_revision)
""")


def test_the_plugin_splits_a_japanese_paragraph_into_sentences_that_are_reused(
        tmp_path: Path) -> None:
    """Segment mode with the plugin in Japanese: a paragraph's sentences are keyed on their
    own, so a new paragraph that shares two of them renders only its new one."""
    from voxcache import Cache, CachedEngine, SynthesisRequest

    cache = Cache(tmp_path / "c")
    cached = CachedEngine(load_engine("styletone"), cache, segments=True)
    first = cached.synthesize(SynthesisRequest(
        "ドアが閉まります。ご注意ください！次は東京です。", language="ja", seed=9))
    assert (first.segments_hit, first.segments_rendered) == (0, 3)
    second = cached.synthesize(SynthesisRequest(
        "ご注意ください！次は東京です。お忘れ物のないように。", language="ja", seed=9))
    assert (second.cache, second.segments_hit, second.segments_rendered) == ("partial", 2, 1)
    whole = CachedEngine(load_engine("styletone"), Cache(tmp_path / "d")).synthesize(
        SynthesisRequest("ご注意ください！次は東京です。お忘れ物のないように。", language="ja",
                         seed=9))
    assert second.audio.pcm == whole.audio.pcm  # the stitch is the whole render, pauses and all
    cache.close()
