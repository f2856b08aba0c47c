"""``voxcache pack pull URL``: a center publishing signed packs, a node pulling them.

The center is ``voxcache serve`` with ``[packs] signing_key`` and an ``[admin]`` key; the
puller is the CLI on another cache folder. A pull is a delta against the last snapshot
it imported whole; a download cut short (a proxy drops the connection mid-pack) is
resumed with Range by the next pull; only trusted signers are imported.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from voxcache.testing import forked

from .nodes import clean_env, cli, entry_files, free_port, serve, write_config

ADMIN = "admin-key-for-packs"


def center_config(tmp_path: Path, key: Path) -> Path:
    return write_config(tmp_path / "center.toml", f"""
[packs]
signing_key = "{key}"
[admin]
api_keys = ["{ADMIN}"]
""")


def pull(folder: Path, url: str, pub: Path, *more: str, key: str | None = ADMIN):
    env = clean_env(**({"VOXCACHE_PACKS_API_KEY": key} if key else {}))
    return cli("--cache-dir", str(folder), "pack", "pull", url, "--trust", str(pub), "--json",
               *more, check=False, env=env)


def report(done) -> dict:
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_pulls_are_deltas_and_only_trusted_signers_are_imported(tmp_path, keys):
    key, pub = keys
    edge = tmp_path / "edge"
    with serve(tmp_path / "center", config=center_config(tmp_path, key)) as center:
        for i in range(5):
            center.say(f"Platform {i} is now boarding.")
        refused = pull(edge, center.url, pub, key=None)
        assert refused.returncode == 1 and "[admin] key" in refused.stderr

        cli("pack", "keygen", "-o", str(tmp_path / "other"))
        untrusted = pull(edge, center.url, tmp_path / "other.pub")
        assert untrusted.returncode == 2 and "not trusted here" in untrusted.stderr
        assert entry_files(edge) == {}

        first = pull(edge, center.url, pub)
        assert first.returncode == 0, first.stderr
        assert report(first)["imported"] == 5 and report(first)["delta"] is False
        again = report(pull(edge, center.url, pub))
        assert again["entries"] == 0 and again["delta"] is True and again["complete"]

        center.say("Platform 6 is now boarding.")
        center.say("Platform 7 is now boarding.")
        scheduled = forked.popen(
            [sys.executable, "-m", "voxcache.cli", "--cache-dir", str(edge), "pack", "pull",
             center.url, "--trust", str(pub), "--json", "--every", "1s"],
            env=clean_env(VOXCACHE_PACKS_API_KEY=ADMIN), stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        rounds = []
        try:
            deadline = time.monotonic() + 60
            while len(rounds) < 2 and time.monotonic() < deadline:
                rounds.append(json.loads(scheduled.stdout.readline()))
        finally:
            # SIGTERM, as a service manager stops it (SIGINT is ignored by a job that was
            # started in the background, as a CI runner may start the tests)
            scheduled.send_signal(signal.SIGTERM)
            stopped = scheduled.wait(timeout=30)
        assert stopped == 130  # a clean stop, like Ctrl-C, not killed by the signal
        assert [r["entries"] for r in rounds] == [2, 0]  # the new ones, then nothing new
        assert set(entry_files(edge)) == set(entry_files(tmp_path / "center"))


def test_a_download_cut_short_is_resumed_by_the_next_pull(tmp_path, keys):
    key, pub = keys
    edge = tmp_path / "edge"
    with serve(tmp_path / "center", config=center_config(tmp_path, key)) as center:
        for i in range(30):
            center.say(f"Announcement {i}: the train to the airport departs from platform "
                       f"{i % 9} in {i + 2} minutes; please mind the gap.")
        with cutting_proxy(center.port, cut_after=120_000) as (proxy_url, cuts):
            cut = pull(edge, proxy_url, pub)
            assert cut.returncode == 1 and "resumes" in cut.stderr, cut.stderr
            assert cuts == [1]
            parts = list((edge / "packs" / "incoming").glob("*.part"))
            assert len(parts) == 1 and parts[0].stat().st_size > 0
            assert entry_files(edge) == {}
            resumed = pull(edge, proxy_url, pub)
        assert resumed.returncode == 0, resumed.stderr
        assert report(resumed)["imported"] == 30 and report(resumed)["complete"]
        assert "status=206" in center.logs()  # the rest, not the whole pack again
        assert not list((edge / "packs" / "incoming").iterdir())
        assert entry_files(edge) == entry_files(tmp_path / "center")


@contextlib.contextmanager
def cutting_proxy(port: int, cut_after: int) -> Iterator[tuple[str, list[int]]]:
    """A TCP proxy to 127.0.0.1:``port`` that drops the connection carrying the first pack
    download once ``cut_after`` bytes of its answer went through (keep-alive connections
    included: the request is spotted in the client's bytes)."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    cuts: list[int] = []
    stop = threading.Event()

    def serve_one(client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", port))
        state = {"sent": 0, "armed": None}

        def requests() -> None:
            with contextlib.suppress(OSError):
                while chunk := client.recv(65536):
                    if b"GET /v1/packs/" in chunk and not cuts and state["armed"] is None:
                        state["armed"] = state["sent"]
                    upstream.sendall(chunk)

        threading.Thread(target=requests, daemon=True).start()
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                armed = state["armed"]
                if armed is not None and state["sent"] + len(chunk) - armed > cut_after:
                    client.sendall(chunk[:armed + cut_after - state["sent"]])
                    cuts.append(1)
                    break
                client.sendall(chunk)
                state["sent"] += len(chunk)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                client, _ = listener.accept()
                threading.Thread(target=serve_one, args=(client,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", cuts
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
