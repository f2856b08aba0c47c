"""``ref_audio_path`` under attack: the server reads a clip only inside the operator's roots.

Every attack goes through ``/tts`` on a real server (a ``voxcache serve`` process
without CAP_DAC_OVERRIDE where unreadable files matter, uvicorn threads elsewhere),
and every refusal must look the same whatever lies behind the path: one status, one
text, no hash or size of anything outside. The races are made deterministic by
swapping the file system at the one instant between the check and the open.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import resource
import stat
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import blake3
import httpx
import numpy as np
import pytest

from voxcache import Cache, CachedEngine
from voxcache.audio import fingerprint_reference
from voxcache.config import load_settings
from voxcache.engines.tone import ToneEngine
from voxcache.errors import InvalidParameter
from voxcache.service import create_app
from voxcache.testing.servers import clean_env

from .servers import free_port, serve_app, wait_until
from .standins import gpt_sovits_app, wav_bytes

REFUSED = "is not a readable reference clip inside this server's reference folders"
NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
          "--bounding-set=-dac_override,-dac_read_search", "--"]
"""Root without the capabilities that read any file: mode 000 is unreadable again."""
ADDRESS_SPACE = 3 << 30
"""The server subprocess's RLIMIT_AS: a process that reads /dev/zero dies at this, not the
machine (the old code did exactly that)."""
KEYS = {"acme": "acme-key-0001", "zeta": "zeta-key-0001"}
HEX_RUN = re.compile(r"[0-9a-f]{16,}")


def clip(pitch: float, seconds: float = 0.5) -> bytes:
    t = np.arange(int(16000 * seconds)) / 16000
    return wav_bytes((0.3 * np.sin(2 * np.pi * pitch * t) * 32767).astype("<i2"), 16000)


def write_config(path: Path, roots: list[Path], *, max_bytes: str | None = None,
                 tenants: bool = False) -> Path:
    lines = [f"reference_roots = {json.dumps([str(r) for r in roots])}"]
    if max_bytes:
        lines.append(f"reference_max_bytes = {json.dumps(max_bytes)}")
    if tenants:
        for tenant, key in KEYS.items():
            lines += [f"[tenants.{tenant}]", f"api_keys = [{json.dumps(key)}]"]
    path.write_text("\n".join(lines) + "\n")
    return path


def as_tenant(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def tts(url: str, path: str, headers: dict[str, str] | None = None,
        **fields: object) -> httpx.Response:
    body = json.dumps({"text": "Platform two.", "text_lang": "en", "prompt_lang": "en",
                       "ref_audio_path": path, **fields})  # \ud800 too
    return httpx.post(f"{url}/tts", content=body, timeout=15,
                      headers={"content-type": "application/json", **(headers or {})})


def refusal(response: httpx.Response, path: str) -> str:
    """The refusal's body with the caller's own path taken out: what must never vary."""
    assert response.status_code == 400, (path, response.status_code, response.text[:300])
    assert REFUSED in response.json()["message"], (path, response.text[:300])
    return response.text.replace(json.dumps(repr(path), ensure_ascii=False)[1:-1], "<path>")


def plant(target: Path, state: Callable[[Path], object]) -> None:
    """Make ``target`` be whatever ``state`` creates, after removing what was there."""
    if target.is_symlink() or target.is_file() or target.is_fifo():
        target.unlink()
    elif target.is_dir():
        target.rmdir()
    state(target)


@contextlib.contextmanager
def voxcache_serve(cache_dir: Path, config: Path, log: Path, *prefix: str,
                   env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """``voxcache serve`` (tone engine) as a real process, capped at ADDRESS_SPACE."""
    port = free_port()
    command = [*prefix, sys.executable, "-m", "voxcache.cli", "--cache-dir", str(cache_dir),
               "--engine", "tone", "--config", str(config), "serve", "--port", str(port)]
    environment = clean_env()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**environment, **(env or {})},
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS,
                                                  (ADDRESS_SPACE, ADDRESS_SPACE)))
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ready_or_exited(url: str, process: subprocess.Popen) -> bool:
    """Wait until the server answers /readyz (True) or its process ends (False)."""
    def settled() -> bool:
        if process.poll() is not None:
            return True
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        return False

    wait_until(settled, what="voxcache serve to answer or exit")
    return process.poll() is None


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A reference root with clips, and things outside it worth stealing."""
    root, outside = tmp_path / "refs", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "voice.wav").write_bytes(clip(300))
    (root / "sub" / "inner.wav").write_bytes(clip(300))
    (outside / "secret.wav").write_bytes(clip(900))
    return {"root": root, "outside": outside, "secret": outside / "secret.wav",
            "cache": tmp_path / "cache"}


def test_every_way_out_of_the_roots_is_one_refusal_and_reads_nothing(tree, tmp_path) -> None:
    """The full battery against ``voxcache serve`` without CAP_DAC_OVERRIDE.

    Missing, outside, a symlink out, a folder swapped for a symlink, unreadable, a
    directory, a FIFO, /dev/zero, a 1 TB sparse file, the cache's own voice clips: one
    status, and byte for byte one body for one path name. /dev/zero and the FIFO must
    neither hang nor grow the process."""
    root, secret = tree["root"], tree["secret"]
    config = write_config(tmp_path / "voxcache.toml", [root], max_bytes="200KB")
    (root / "locked.wav").write_bytes(clip(300))
    (root / "locked.wav").chmod(0)
    (root / "link-in.wav").symlink_to("voice.wav")  # stays inside: followed
    (root / "link-out.wav").symlink_to(secret)
    (root / "etc").symlink_to("/etc")
    (root / "up").symlink_to("..")
    (root / "zero").symlink_to("/dev/zero")
    os.mkfifo(root / "fifo")
    (root / "folder").mkdir()
    (root / "big.wav").write_bytes(clip(300, seconds=8))  # 256 KB: over the 200 KB cap
    with (root / "huge.wav").open("wb") as sparse:
        sparse.truncate(1 << 40)  # 1 TB of nothing: reading it would never end
    with voxcache_serve(tree["cache"], config, tmp_path / "serve.log", *NO_DAC) as (url, proc):
        assert ready_or_exited(url, proc), (tmp_path / "serve.log").read_text()
        # the first upload loads the speaker encoder (torch, its weights, librosa's kernels):
        # 2.8 s on an idle 2-vCPU host; it hit a 15 s timeout on a host saturated with writes
        voice = httpx.post(f"{url}/v1/voices", files={"file": ("v.wav", clip(500))},
                           data={"prompt_text": "Hi."}, timeout=120).json()
        [stored] = tree["cache"].glob(f"voices/*/{voice['id']}/clip")
        (root / "stolen-voice").symlink_to(stored)
        baseline = peak_rss_mb(proc.pid)

        allowed = {p: tts(url, p) for p in ("voice.wav", "link-in.wav", "sub/inner.wav",
                                             str(root / "voice.wav"), "./sub//inner.wav")}
        attacks = ["../outside/secret.wav", "sub/../../outside/secret.wav",
                   "sub/../voice.wav", str(secret), "/etc/passwd", "/dev/zero",
                   "/proc/self/environ", str(stored), f"{root}/../outside/secret.wav",
                   "link-out.wav", "etc/passwd", "up/outside/secret.wav", "zero", "fifo",
                   "folder", "locked.wav", "missing.wav", "stolen-voice",
                   "voice.wav\u0000.txt", "\ud800.wav"]
        refused = {p: tts(url, p) for p in attacks}
        too_big = [tts(url, "big.wav"), tts(url, "huge.wav")]

        probe = root / "probe.wav"
        states: list[Callable[[Path], object]] = [
            lambda p: None,                                          # missing
            lambda p: p.symlink_to("/etc/passwd"),                   # outside
            lambda p: p.symlink_to(secret),                          # a real clip outside
            lambda p: p.symlink_to(stored),                          # the cache's voice clip
            lambda p: p.symlink_to("../outside/secret.wav"),         # relative way out
            lambda p: (p.write_bytes(clip(300)), p.chmod(0)),        # unreadable
            lambda p: p.mkdir(),                                     # a folder
            os.mkfifo,                                               # a FIFO
            lambda p: p.symlink_to("/dev/zero"),                     # endless
        ]
        bodies = []
        for state in states:
            plant(probe, state)
            bodies.append(tts(url, "probe.wav"))
        peak = peak_rss_mb(proc.pid)
        print(f"server peak RSS: {baseline:.0f} MB before the attacks, {peak:.0f} MB after")

    assert peak - baseline < 64, (baseline, peak)  # /dev/zero, the FIFO, 1 TB: nothing read
    shapes = {refusal(response, path) for path, response in refused.items()}
    assert len(shapes) == 1, shapes
    assert len({b.content for b in bodies}) == 1, [b.text[:200] for b in bodies]
    refusal(bodies[0], "probe.wav")
    for response in too_big:  # inside the root: the limit may be named, never the size
        assert response.status_code == 400 and "limit of 200000 bytes" in response.text
        assert "256" not in response.text and str(1 << 40) not in response.text
    # the one shape (the caller's path taken out) names no hash of anything
    assert not HEX_RUN.search(shapes.pop()) and not HEX_RUN.search(bodies[0].text)
    for path, response in allowed.items():
        assert response.status_code == 200, (path, response.text[:300])
    assert {r.headers["X-Cache"] for r in list(allowed.values())[1:]} == {"HIT"}


def test_tenants_read_only_their_own_folder(tree, tmp_path) -> None:
    """With API keys, tenant T reads ``<root>/T/`` only: not another tenant's folder by any
    spelling, not the shared top of the root, and 'someone else's' looks like 'absent'."""
    root = tree["root"]
    for tenant, pitch in (("acme", 300), ("zeta", 800)):
        (root / tenant).mkdir()
        (root / tenant / "voice.wav").write_bytes(clip(pitch))
    (root / "acme" / "peek.wav").symlink_to("../zeta/voice.wav")  # inside the root, not acme's
    settings = load_settings(write_config(tmp_path / "t.toml", [root], tenants=True),
                             cache_dir=tree["cache"])
    cached = CachedEngine(ToneEngine(), Cache(settings.cache_dir, settings.cache_config()))
    app = create_app(settings, cached=cached)
    with serve_app(app) as url:
        own = [tts(url, p, as_tenant("acme")) for p in ("voice.wav",
                                                         str(root / "acme" / "voice.wav"))]
        zeta = tts(url, "voice.wav", as_tenant("zeta"))
        attacks = [str(root / "zeta" / "voice.wav"), "../zeta/voice.wav", "zeta/voice.wav",
                   str(root / "voice.wav"), "peek.wav", "../voice.wav", str(root / "acme")]
        refused = {p: tts(url, p, as_tenant("acme")) for p in attacks}
        probe = root / "acme" / "probe.wav"
        absent = tts(url, "probe.wav", as_tenant("acme"))
        probe.symlink_to("../zeta/voice.wav")
        someone_elses = tts(url, "probe.wav", as_tenant("acme"))
    cached.cache.close()
    assert len({refusal(r, p) for p, r in refused.items()}) == 1
    assert absent.content == someone_elses.content
    refusal(absent, "probe.wav")
    assert [r.status_code for r in (*own, zeta)] == [200, 200, 200], own[0].text
    assert own[1].headers["X-Cache"] == "HIT" and zeta.content != own[0].content


def test_cloning_from_a_path_in_a_root_is_the_clip_itself(tree, tmp_path, monkeypatch) -> None:
    """A real cloning render (tone engine): ``/tts`` with a path in the second of two roots
    (``VOXCACHE_REFERENCE_ROOTS``, ``os.pathsep``-separated) keys and renders exactly like
    the same bytes sent inline to ``/v1/synthesize``."""
    first_root = tmp_path / "first"
    first_root.mkdir()
    (first_root / "other.wav").write_bytes(clip(650))
    monkeypatch.setenv("VOXCACHE_REFERENCE_ROOTS", f"{first_root}{os.pathsep}{tree['root']}")
    settings = load_settings(cache_dir=tree["cache"])
    cached = CachedEngine(ToneEngine(), Cache(settings.cache_dir, settings.cache_config()))
    with serve_app(create_app(settings, cached=cached)) as url:
        by_path = tts(url, "voice.wav", prompt_text="Hello there.")
        inline = httpx.post(f"{url}/v1/synthesize", timeout=15, json={
            "text": "Platform two.", "prompt_text": "Hello there.", "response_format": "wav",
            "reference_audio": base64.b64encode((tree["root"] / "voice.wav").read_bytes())
            .decode()})
        other = tts(url, "other.wav", prompt_text="Hello there.")
        plain = httpx.post(f"{url}/tts", json={"text": "Platform two.", "text_lang": "en"},
                           timeout=15)
    cached.cache.close()
    assert by_path.status_code == 200, by_path.text
    assert (by_path.headers["X-Cache"], inline.headers["X-Cache"]) == ("MISS", "HIT")
    assert inline.headers["X-Cache-Key"] == by_path.headers["X-Cache-Key"]
    assert inline.content == by_path.content
    assert other.status_code == 200 and other.content != by_path.content
    assert plain.status_code == 200 and plain.content != by_path.content
    assert len(cached.engine.calls) == 3


def test_without_roots_no_path_is_read(tree, monkeypatch) -> None:
    monkeypatch.delenv("VOXCACHE_REFERENCE_ROOTS", raising=False)
    settings = load_settings(cache_dir=tree["cache"])
    cached = CachedEngine(ToneEngine(), Cache(settings.cache_dir, settings.cache_config()))
    with serve_app(create_app(settings, cached=cached)) as url:
        answer = tts(url, str(tree["root"] / "voice.wav"))
    cached.cache.close()
    assert answer.status_code == 400
    message = answer.json()["message"]
    assert "does not read reference paths" in message and "reference_roots" in message
    assert "/v1/voices" in message and cached.engine.calls == []


@pytest.mark.parametrize("field, value, kind", [
    ("text", ["Platform", "two."], "a list"), ("text", 42, "a number"),
    ("text", {"say": "hi"}, "an object"), ("text_lang", ["en"], "a list"),
    ("prompt_text", 7, "a number"), ("prompt_lang", False, "a boolean"),
    ("ref_audio_path", ["voice.wav"], "a list")])
def test_tts_text_fields_must_be_strings(cached_tone, field, value, kind) -> None:
    """api_v2 types these as str: ``str(["Platform", "two."])`` used to be spoken."""
    app = create_app(load_settings(cache_dir=cached_tone.cache.root), cached=cached_tone)
    with serve_app(app) as url:
        answer = httpx.post(f"{url}/tts", timeout=15, json={
            "text": "Platform two.", "text_lang": "en", field: value})
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == f"{field} must be a string, got {kind}"
    assert cached_tone.engine.calls == []


@pytest.mark.parametrize("where", ["contains", "inside"])
def test_a_root_overlapping_the_cache_stops_the_server(tmp_path, where) -> None:
    """The cache folder holds every tenant's takes and voice clips: never readable by path."""
    cache = tmp_path / "cache"
    (cache / "voices").mkdir(parents=True)
    ok = tmp_path / "refs"
    ok.mkdir()
    config = write_config(tmp_path / "c.toml", [ok])
    bad = tmp_path if where == "contains" else cache / "voices"
    env = {"VOXCACHE_REFERENCE_ROOTS": f"{ok}{os.pathsep}{bad}"}
    log = tmp_path / "serve.log"
    with voxcache_serve(cache, config, log, env=env) as (url, process):
        started = ready_or_exited(url, process)
    output = log.read_text()
    assert not started and process.returncode == 2, output
    verb = "contains" if where == "contains" else "lies inside"
    assert f"reference root {bad} {verb} the cache folder" in output


def test_gateway_keys_by_content_and_reads_nothing_outside(tree, tmp_path) -> None:
    """``--upstream gpt-sovits=URL`` with tenants: a clip inside the tenant's folder is keyed
    by its content (two names, one key; overwritten in place, a new key), the upstream is
    sent the file read; nothing outside is read or passed on, and no error names a hash —
    neither through ``/tts`` nor through ``params`` on ``/v1/synthesize``."""
    root, secret = tree["root"], tree["secret"]
    acme = root / "acme"
    acme.mkdir()
    (acme / "voice.wav").write_bytes(clip(300))
    (acme / "copy.wav").write_bytes(clip(300))
    (acme / "link-out.wav").symlink_to(secret)
    (acme / "takes").mkdir()
    (acme / "takes" / "v3.wav").write_bytes(clip(555))
    (acme / "current.wav").symlink_to("takes/v3.wav")  # stays inside: followed
    upstream = gpt_sovits_app(acme)
    config = write_config(tmp_path / "g.toml", [root], tenants=True)
    with serve_app(upstream) as upstream_url:
        settings = load_settings(config, cache_dir=tree["cache"],
                                 upstream=f"gpt-sovits={upstream_url}")
        app = create_app(settings)
        key = as_tenant("acme")
        fields = {"text_lang": "en", "prompt_text": "Hello.", "prompt_lang": "en"}
        with serve_app(app) as url:
            first = tts(url, "voice.wav", key, **fields)
            copy = tts(url, "copy.wav", key, **fields)
            absolute = tts(url, str(acme / "voice.wav"), key, **fields)
            calls_before = len(upstream.state.calls)
            (acme / "voice.wav").write_bytes(clip(450))  # the operator replaces it in place
            replaced = tts(url, "voice.wav", key, **fields)
            linked = tts(url, "current.wav", key, **fields)
            attacks = ["/etc/passwd", str(secret), "../../outside/secret.wav", "link-out.wav",
                       "../voice.wav", str(root / "voice.wav")]
            refused = {p: tts(url, p, key, **fields) for p in attacks}
            forged = [httpx.post(f"{url}/v1/synthesize", headers=key, timeout=15, json={
                "text": "Hi.", "params": {"ref_audio_path": path, "ref_audio_id": "pcm:0"}})
                for path in (str(secret), "link-out.wav", "copy.wav")]
        app.state.server.cached.cache.close()
    calls = upstream.state.calls
    takes = (first, copy, absolute, replaced, linked)
    assert [r.status_code for r in takes] == [200] * 5, first.text
    assert [r.headers["X-Cache"] for r in takes] == ["MISS", "HIT", "HIT", "MISS", "MISS"]
    assert calls_before == 1 and len(calls) == 3
    assert replaced.content != first.content
    assert calls[0]["ref_audio_path"] == str(acme / "voice.wav")  # the shared mount's path
    assert calls[2]["ref_audio_path"] == str(acme / "takes" / "v3.wav")  # the file, not the link
    assert len({refusal(r, p) for p, r in refused.items()}) == 1
    assert [r.status_code for r in forged] == [400, 400, 400]
    assert REFUSED in forged[0].text and REFUSED in forged[1].text
    assert "does not match" in forged[2].text
    hashes = [blake3.blake3(secret.read_bytes()).hexdigest(),
              fingerprint_reference(secret.read_bytes()).fingerprint,
              fingerprint_reference((acme / "copy.wav").read_bytes()).fingerprint]
    for answer in [*refused.values(), *forged]:
        assert not any(h[:16] in answer.text for h in hashes), answer.text
        assert not HEX_RUN.search(answer.text)
        assert "pcm:" not in answer.text and "bytes:" not in answer.text


_watchers: list[Callable[[str], None]] = []
_in_hook = threading.local()
_hooked: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    """Audit hook: hand every path this process is about to open to the watching test.

    Python raises ``open`` before the system call, for ``os.open`` and ``io.open`` alike —
    so a watcher sees, in the server's own thread, the instant between the last check and
    the open, in the old code and the new."""
    if event != "open" or not _watchers or getattr(_in_hook, "busy", False):
        return
    path = args[0]
    if not isinstance(path, str | bytes | os.PathLike):
        return
    _in_hook.busy = True
    try:
        for watcher in list(_watchers):
            watcher(os.fsdecode(path))
    finally:
        _in_hook.busy = False


@contextlib.contextmanager
def watching_opens(watcher: Callable[[str], None]) -> Iterator[None]:
    if not _hooked:  # audit hooks cannot be removed: one for the session, idle without watchers
        sys.addaudithook(_audit)
        _hooked.append(True)
    _watchers.append(watcher)
    try:
        yield
    finally:
        _watchers.remove(watcher)


def swap_at_open(target: str, attack: Callable[[], None]) -> Callable[[str], None]:
    """A watcher that runs ``attack`` once, the moment ``target`` is about to be opened."""
    done: list[bool] = []

    def watcher(path: str) -> None:
        if os.path.normpath(path) == target and not done:
            done.append(True)
            attack()

    return watcher


@pytest.mark.piper
def test_piper_end_to_end_path_rules_come_first(piper, tree, tmp_path) -> None:
    """Real Piper cannot clone, but a path is judged before that: /etc/passwd (through a
    symlink in the root) and a missing clip give the same 400, and /etc/passwd is never
    opened (an audit hook watches every open of this process)."""
    settings = load_settings(write_config(tmp_path / "p.toml", [tree["root"]]),
                             cache_dir=tree["cache"])
    cached = CachedEngine(piper, Cache(settings.cache_dir, settings.cache_config()))
    probe = tree["root"] / "probe.wav"
    opened: list[str] = []
    with serve_app(create_app(settings, cached=cached)) as url:
        spoken = httpx.post(f"{url}/tts", json={"text": "Platform two.", "text_lang": "en"},
                            timeout=60)
        with watching_opens(lambda path: opened.append(os.path.realpath(path))):
            missing = tts(url, "probe.wav")
            probe.symlink_to("/etc/passwd")
            passwd = tts(url, "probe.wav")
            direct = tts(url, "/etc/passwd")
        inside = tts(url, "voice.wav")
    cached.cache.close()
    assert "/etc/passwd" not in opened, opened
    assert spoken.status_code == 200 and spoken.content.startswith(b"RIFF"), spoken.text
    assert missing.content == passwd.content
    assert refusal(missing, "probe.wav") == refusal(direct, "/etc/passwd")
    assert inside.status_code == 400 and "cannot clone" in inside.json()["message"]


def test_a_file_swapped_for_a_symlink_after_the_check_is_not_read(tree, tmp_path) -> None:
    """The clip becomes a symlink to a file outside at the last instant before the open:
    ``O_NOFOLLOW`` makes that open fail (and an open that followed it would be refused by
    the post-open check, as in the next test)."""
    root, secret = tree["root"], tree["secret"]
    target = os.path.realpath(root / "voice.wav")

    def swap() -> None:
        os.unlink(target)
        os.symlink(secret, target)

    settings = load_settings(write_config(tmp_path / "r.toml", [root]), cache_dir=tree["cache"])
    cached = CachedEngine(ToneEngine(), Cache(settings.cache_dir, settings.cache_config()))
    with (serve_app(create_app(settings, cached=cached)) as url,
          watching_opens(swap_at_open(target, swap))):
        raced = tts(url, target)
    cached.cache.close()
    assert os.path.islink(target)  # the swap did happen, mid-request
    refusal(raced, target)
    assert cached.engine.calls == []


def test_a_folder_swapped_for_a_symlink_is_caught_by_what_the_kernel_opened(
        tree, tmp_path) -> None:
    """A folder on the way becomes a symlink into another tenant's folder at the last
    instant: ``O_NOFOLLOW`` guards only the last component, so the open succeeds on zeta's
    clip, and the kernel's name for it (/proc/self/fd) is what refuses it."""
    root = tree["root"]
    for tenant, pitch in (("acme", 300), ("zeta", 900)):
        (root / tenant / "sub").mkdir(parents=True)
        (root / tenant / "sub" / "voice.wav").write_bytes(clip(pitch))
    target = os.path.realpath(root / "acme" / "sub" / "voice.wav")

    def swap() -> None:
        (root / "acme" / "sub").rename(root / "acme" / "moved")
        (root / "acme" / "sub").symlink_to(root / "zeta" / "sub")

    settings = load_settings(write_config(tmp_path / "t.toml", [root], tenants=True),
                             cache_dir=tree["cache"])
    cached = CachedEngine(ToneEngine(), Cache(settings.cache_dir, settings.cache_config()))
    with (serve_app(create_app(settings, cached=cached)) as url,
          watching_opens(swap_at_open(target, swap))):
        raced = tts(url, target, as_tenant("acme"))
    cached.cache.close()
    assert (root / "acme" / "sub").is_symlink()  # the swap did happen, mid-request
    refusal(raced, target)
    assert cached.engine.calls == []


def test_a_clip_growing_after_fstat_is_read_no_further_than_the_cap(tmp_path,
                                                                     monkeypatch) -> None:
    """fstat said 16 KB; by the read it is 64 MB: at most cap + 1 bytes are read (traced).
    A unit test: the old code has no size check to race."""
    from voxcache.references import ReferenceFolders, ReferenceTooLarge

    root = tmp_path / "refs"
    root.mkdir()
    path = root / "voice.wav"
    path.write_bytes(clip(300))  # 16 KB, under the cap when checked
    real_fstat = os.fstat

    def fstat_then_grow(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        if stat.S_ISREG(info.st_mode) and path.stat().st_size < (64 << 20):
            os.truncate(path, 64 << 20)
        return info

    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    tracemalloc.start()
    try:
        with pytest.raises(ReferenceTooLarge, match="limit of 100000 bytes"):
            ReferenceFolders([root], max_bytes=100_000).read("voice.wav")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


def test_reference_settings_are_checked(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VOXCACHE_REFERENCE_ROOTS", f"{tmp_path}{os.pathsep}relative/refs")
    with pytest.raises(InvalidParameter, match="absolute folders.*relative/refs"):
        load_settings()
    monkeypatch.setenv("VOXCACHE_REFERENCE_ROOTS", str(tmp_path))
    monkeypatch.setenv("VOXCACHE_REFERENCE_MAX_BYTES", "none")
    with pytest.raises(InvalidParameter, match="reference_max_bytes"):
        load_settings()
    monkeypatch.setenv("VOXCACHE_REFERENCE_MAX_BYTES", "2MB")
    settings = load_settings()
    assert settings.reference_roots == (tmp_path,) and settings.reference_max_bytes == 2_000_000
