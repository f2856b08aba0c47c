"""``GET /v1/audio/{key}`` and ``DELETE /v1/entries/{key}`` under attack.

Range bytes come from the verified entry, never from the file as it is now; a probe
of another tenant's key costs what an absent key costs and leaves the owner's
entry untouched; a delete takes the entry's encoded deliveries with it.
"""

from __future__ import annotations

import os
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from voxcache.testing.stored import stored_bytes
from voxcache.tiers.layout import entry_path

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
KEYS = {"A": "key-of-tenant-a", "B": "key-of-tenant-b"}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


# -- Range ---------------------------------------------------------------------------------
def test_range_comes_from_verified_bytes_with_piper(make_app, live, piper, tmp_path) -> None:
    """End to end with Piper: a file changed or replaced by a symlink after it was verified
    used to be sent as 206 straight from the disk."""
    app, cached = make_app(engine=piper)
    with live(app) as server:
        made = httpx.post(f"{server.url}/v1/audio/speech", json={
            "input": "Please stand clear of the closing doors.", "response_format": "wav",
            "params": DETERMINISTIC}, timeout=60)
        key = made.headers["x-cache-key"]
        blob = httpx.get(f"{server.url}/v1/audio/{key}", timeout=60).content
        part = httpx.get(f"{server.url}/v1/audio/{key}", headers={"Range": "bytes=100-1099"},
                         timeout=60)
        assert part.status_code == 206 and part.content == blob[100:1100]
        assert part.headers["content-range"] == f"bytes 100-1099/{len(blob)}"

        # the file changes after this process verified it: the verified bytes are sent
        path = entry_path(cached.cache.root, key, "audio")
        data = bytearray(path.read_bytes())
        data[500] ^= 0xFF
        path.write_bytes(bytes(data))
        again = httpx.get(f"{server.url}/v1/audio/{key}", headers={"Range": "bytes=0-999"},
                          timeout=60)
        assert again.status_code == 206 and again.content == blob[:1000]
        # ... or is replaced by a symlink to /etc/passwd
        os.unlink(path)
        os.symlink("/etc/passwd", path)
        linked = httpx.get(f"{server.url}/v1/audio/{key}", headers={"Range": "bytes=0-99"},
                           timeout=60)
        assert linked.status_code == 206 and linked.content == blob[:100]

    # a fresh process over the same folder finds the symlink: never followed, quarantined
    app, cached = make_app(engine=piper)
    with live(app) as server:
        probe = httpx.get(f"{server.url}/v1/audio/{key}", headers={"Range": "bytes=0-99"},
                          timeout=60)
        assert probe.status_code == 404
        assert b"root:" not in probe.content
        assert not os.path.lexists(path)


def test_range_forms(make_app) -> None:
    app, _ = make_app()
    client = TestClient(app)
    key = client.post("/v1/audio/speech", json={"input": "Ranges.", "response_format": "wav"}
                      ).headers["x-cache-key"]
    blob = client.get(f"/v1/audio/{key}").content
    size = len(blob)

    def get(**headers: str) -> httpx.Response:
        return client.get(f"/v1/audio/{key}", headers=headers)

    assert get(Range="bytes=-10").content == blob[-10:]
    assert get(Range="bytes=10-").content == blob[10:]
    assert get(Range=f"bytes=0-{size * 2}").content == blob
    unsatisfiable = get(Range=f"bytes={size}-")
    assert unsatisfiable.status_code == 416
    assert unsatisfiable.headers["content-range"] == f"bytes */{size}"
    assert get(Range="bytes=0-1,5-9").status_code == 200  # several ranges: the whole body
    assert get(Range="lines=1-2").content == blob
    assert get(Range="bytes=0-9", **{"If-Range": '"other"'}).status_code == 200
    assert get(Range="bytes=0-9", **{"If-Range": f'"{key}"'}).content == blob[:10]


# -- tenants -------------------------------------------------------------------------------------
def test_probing_another_tenants_key_reads_nothing_and_counts_nothing(make_app) -> None:
    """The other tenant's key used to be read and verified before the tenant check (1-2 ms
    against 0.4-0.6 ms for an absent key) and the probe counted as a hit for its owner."""
    app, cached = make_app(api_keys={KEYS["A"]: "acme", KEYS["B"]: "globex"})
    client = TestClient(app)
    keys = [client.post("/v1/audio/speech", headers=auth("A"), json={
        "input": f"Acme announcement {i}.", "response_format": "wav"}).headers["x-cache-key"]
        for i in range(3)]
    cache = cached.cache
    cache.folder.flush()
    memory_order = list(cache.in_process._items["audio"])
    hits_before = {r.key: r.hits for r in cache.folder.index.rows()}

    victim = keys[0]  # in memory: the fast path's peek must not promote it
    on_disk = keys[1]
    cache.in_process.delete(on_disk)  # on disk only: the route must not read it
    path = entry_path(cache.root, on_disk, "audio")
    stamp = path.stat().st_mtime
    os.utime(path, (1.0, stamp))  # atime far behind mtime: any read moves it (relatime)

    absent = "f" * 64
    answers = []
    for key in (victim, on_disk, absent):
        probe = client.get(f"/v1/audio/{key}", headers=auth("B"))
        assert probe.status_code == 404, key
        answers.append((probe.text.replace(key, "KEY"), sorted(probe.headers.items())))
    assert answers[0] == answers[1] == answers[2]  # "someone else's" reads as "absent"
    assert path.stat().st_atime == 1.0, "the other tenant's file was read"
    assert list(cache.in_process._items["audio"]) == [k for k in memory_order if k != on_disk]
    cache.folder.flush()
    assert {r.key: r.hits for r in cache.folder.index.rows()} == hits_before

    # the owner still gets it, and that read is visible the way the probe's would have been
    assert client.get(f"/v1/audio/{on_disk}", headers=auth("A")).status_code == 200
    assert path.stat().st_atime > 1.0


def test_absent_and_foreign_keys_take_the_same_steps(make_app, monkeypatch) -> None:
    """Equal cost by construction: one memory peek and one index lookup each, no file
    read. (The timings side by side are in `python -m bench.probes.tenant_probe`.)"""
    app, cached = make_app(api_keys={KEYS["A"]: "acme", KEYS["B"]: "globex"})
    client = TestClient(app)
    foreign = client.post("/v1/audio/speech", headers=auth("A"), json={
        "input": "Only for acme.", "response_format": "wav"}).headers["x-cache-key"]
    steps: list[str] = []
    disk = cached.cache.folder
    for name in ("owner", "get"):
        real = getattr(disk, name)
        monkeypatch.setattr(disk, name, lambda *a, _real=real, _name=name, **k: (
            steps.append(_name), _real(*a, **k))[1])
    for key in (foreign, "e" * 64):
        steps.clear()
        assert client.get(f"/v1/audio/{key}", headers=auth("B")).status_code == 404
        assert steps == ["owner"], (key, steps)


# -- delete --------------------------------------------------------------------------------
def test_delete_takes_the_encoded_deliveries_with_it(make_app) -> None:
    app, cached = make_app()
    client = TestClient(app)
    body = {"input": "Encoded then deleted.", "response_format": "mp3"}
    first = client.post("/v1/audio/speech", json=body)
    key = first.headers["x-cache-key"]
    cached.cache.folder.flush()
    encoded = [r for r in cached.cache.folder.index.rows("kind = 'encoded'")]
    assert len(encoded) == 1
    assert stored_bytes(cached.cache, encoded[0].key, "encoded") is not None  # file or inline

    assert client.delete(f"/v1/entries/{key}").status_code == 204
    assert stored_bytes(cached.cache, encoded[0].key, "encoded") is None
    assert cached.cache.in_process.get(encoded[0].key, "encoded") is None
    cached.cache.folder.flush()
    assert cached.cache.folder.index.rows() == []
    again = client.post("/v1/audio/speech", json=body)
    assert again.headers["x-cache"] == "MISS" and again.content == first.content


# -- modes ---------------------------------------------------------------------------------
def test_everything_in_a_used_cache_folder_is_private(make_app, tmp_path) -> None:
    """SQLite files and their -wal/-shm, pin markers, shard parents and voices/ used to be
    0644/0755. Under umask 022, after a workout that creates every kind of file:"""
    old = os.umask(0o022)
    try:
        app, cached = make_app(segments=True)
        client = TestClient(app)
        made = client.post("/v1/audio/speech", json={"input": "One. Two.", "response_format":
                                                      "mp3"})
        key = made.headers["x-cache-key"]
        assert client.put(f"/v1/entries/{key}/pin").status_code == 204
        import io

        import numpy as np
        import soundfile
        clip = io.BytesIO()
        soundfile.write(clip, np.zeros(16000), 16000, format="WAV")
        assert client.post("/v1/voices", files={"file": ("c.wav", clip.getvalue())},
                           data={"prompt_text": "hello"}).status_code in (200, 201)
        cached.usage.flush()
        cached.cache.folder.flush()
        cached.cache.delete("0" * 64)  # writes the invalidation log
        time.sleep(0.05)
    finally:
        os.umask(old)
    root = cached.cache.root
    wide = []
    for folder, dirs, files in os.walk(tmp_path / "cache"):
        for name in dirs:
            if os.stat(os.path.join(folder, name)).st_mode & 0o077:
                wide.append(os.path.join(folder, name))
        for name in files:
            if os.stat(os.path.join(folder, name)).st_mode & 0o077:
                wide.append(os.path.join(folder, name))
    assert wide == []
    names = {p.name for p in root.iterdir()}
    assert {"index.sqlite3-wal", "pins", "voices"} <= names, names
    assert not {"usage.sqlite3", "aliases.sqlite3", "history.sqlite3"} & names, names
    assert (root / "pins" / key).exists()


@pytest.mark.parametrize("path", ["/v1/audio/" + "a" * 64, "/v1/audio/short"])
def test_unknown_keys_are_404_not_500(make_app, path) -> None:
    app, _ = make_app()
    assert TestClient(app).get(path).status_code == 404


@pytest.mark.parametrize("ttl", ["inf", "nan", "-1"])
def test_a_pin_ttl_must_be_finite_and_positive(make_app, ttl) -> None:
    """`?ttl=inf` used to write {"until": Infinity} into the pin marker."""
    app, cached = make_app()
    client = TestClient(app)
    key = client.post("/v1/audio/speech", json={"input": "Pin me.", "response_format": "wav"}
                      ).headers["x-cache-key"]
    answer = client.put(f"/v1/entries/{key}/pin", params={"ttl": ttl})
    assert answer.status_code == 400, answer.text
    assert not cached.cache.folder.is_pinned(key)
