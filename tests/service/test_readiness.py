"""/readyz on storage faults: the service fails open, so it stays ready and says what is wrong,
and its probe never leaves a file behind — on a real full tmpfs, one out of inodes, and a
read-only remount. 503 is for a service that cannot answer (its I/O pool shut down).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile
from fastapi.testclient import TestClient

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs with 64 inodes, unmounted after the test."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,nr_inodes=64", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_blocks(mount: Path) -> None:
    """Write until the file system refuses a byte more."""
    with open(mount / "filler", "wb", buffering=0) as f:  # nothing left to flush at close
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with contextlib.suppress(OSError), open(mount / "filler", "ab") as f:  # the last partial page
        while True:
            f.write(b"\0")
            f.flush()


def fill_inodes(mount: Path) -> None:
    for i in range(10_000):
        try:
            (mount / f"inode-{i}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return
    raise AssertionError("the inodes never ran out")


def entries(root: Path) -> set[str]:
    return set(os.listdir(root))


def assert_ready_but_not_writable(client: TestClient, *reason_words: str) -> dict:
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ready" and body["storage"]["writable"] is False
    for word in reason_words:
        assert word in body["storage"]["reason"], body
    return body


def test_full_disk_ready_served_and_no_probe_left(make_app, tmpfs: Path) -> None:
    app, _ = make_app(cache_dir=tmpfs / "cache")
    client = TestClient(app)
    assert client.get("/readyz").json()["storage"]["writable"] is True
    fill_blocks(tmpfs)
    before = entries(tmpfs / "cache")
    for _ in range(3):
        body = assert_ready_but_not_writable(client, "no space left on device")
        assert str(tmpfs) not in str(body)  # the reason names the fault, not the path
    assert entries(tmpfs / "cache") == before
    served = client.post("/v1/audio/speech", json={"input": "Full disk, still served.",
                                                   "response_format": "wav"})
    assert served.status_code == 200 and served.content[:4] == b"RIFF"


def test_no_inode_left_ready_and_no_probe_left(make_app, tmpfs: Path) -> None:
    app, _ = make_app(cache_dir=tmpfs / "cache")
    client = TestClient(app)
    fill_inodes(tmpfs)
    before = entries(tmpfs / "cache")
    assert_ready_but_not_writable(client, "no space left on device")
    assert entries(tmpfs / "cache") == before
    assert client.post("/v1/audio/speech", json={"input": "No inode, still served."}
                       ).status_code == 200


def test_read_only_remount_ready_then_writable_again(make_app, tmpfs: Path) -> None:
    """The cache folder is bind-mounted over itself and that mount remounted read-only: the
    kernel refuses to remount the tmpfs itself while the index is open for writing, and this
    is what a running server meets (files it holds open stay writable, new ones are EROFS)."""
    cache = tmpfs / "cache"
    app, _ = make_app(cache_dir=cache)
    client = TestClient(app)
    before = entries(cache)
    subprocess.run(["mount", "--bind", str(cache), str(cache)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(cache)], check=True)
        assert_ready_but_not_writable(client, "read-only file system")
        assert client.post("/v1/audio/speech", json={"input": "Read-only, still served."}
                           ).status_code == 200
        assert entries(cache) == before
    finally:
        unmount_bind(cache)
    assert client.get("/readyz").json()["storage"] == {"writable": True}


def unmount_bind(path: Path) -> None:
    """Unmount the bind mount at ``path``; when it is busy, fail with what holds it (once
    in ~1,600 suite runs' worth of tests it was, and nothing said what)."""
    mount_id = [line.split()[0] for line in Path("/proc/self/mountinfo").read_text()
                .splitlines() if line.split()[4] == str(path)][-1]
    done = subprocess.run(["umount", str(path)], capture_output=True, text=True)
    if done.returncode == 0:
        return
    held = [f"{pid} {what}" for pid, what in _open_under(path, mount_id)]
    subprocess.run(["umount", "-l", str(path)], check=False)
    raise AssertionError(f"{done.stderr.strip()}; held by: {held or 'nothing found'}")


def _open_under(path: Path, mount_id: str) -> Iterator[tuple[str, str]]:
    """(pid, what) for every descriptor on the mount ``mount_id`` and every mapping of a
    file under ``path``, in any process."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                    if f"mnt_id:\t{mount_id}\n" in info:
                        yield pid, f"fd {fd} {os.readlink(f'/proc/{pid}/fd/{fd}')}"
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                if str(path) in line:
                    yield pid, f"mapped {line.split()[-1]}"
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(path)):
                yield pid, "working directory"


def test_the_probe_never_writes_through_a_planted_link(make_app, tmp_path: Path) -> None:
    """The old probe's name was predictable (`.tmp-ready-<pid>`) and opened with "wb": a
    symlink planted there had its target truncated and overwritten."""
    app, cached = make_app()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = Path(cached.cache.root) / f".tmp-ready-{os.getpid()}"
    link.symlink_to(victim)
    assert TestClient(app).get("/readyz").status_code == 200
    assert victim.read_text() == "precious"


def test_readyz_is_503_once_the_service_is_shutting_down(make_app) -> None:
    app, _ = make_app()
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/readyz").status_code == 200
    app.state.server.admission.shutdown()  # what the lifespan does when the server stops
    refused = client.get("/readyz")
    assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]


@pytest.mark.piper
def test_piper_answers_a_synthesis_on_a_full_disk(make_app, piper, tmpfs: Path) -> None:
    app, _ = make_app(engine=piper, cache_dir=tmpfs / "cache", segments=True)
    client = TestClient(app)
    fill_blocks(tmpfs)
    before = entries(tmpfs / "cache")
    assert_ready_but_not_writable(client, "no space left on device")
    said = client.post("/v1/audio/speech", json={
        "input": "The disk is full. You still hear this.", "response_format": "wav",
        "params": DETERMINISTIC})
    assert said.status_code == 200, said.text
    samples, rate = soundfile.read(io.BytesIO(said.content), dtype="int16")
    assert rate == 22050 and len(samples) > rate  # over a second of speech
    assert not [name for name in entries(tmpfs / "cache") - before if ".tmp" in name]
