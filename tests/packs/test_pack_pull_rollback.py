"""``pack pull`` cannot be rolled back: purges travel from the center, and neither the center
nor anyone on the way can hand an edge another or an older pack.

The center is ``voxcache serve`` with a signing key; purges are ``voxcache purge`` on its
folder while it serves; the edge is the real CLI. Between them, for the attacks, an HTTP
proxy that lies: it swaps the pack's bytes for an older pack's, rewrites the center's
answer to name an older pack, or sends more bytes than the pack has.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from .nodes import cli, entry_files, free_port, serve
from .test_pack_pull import ADMIN, center_config, cutting_proxy, pull, report

TEXTS = ["Take A: the store closes soon.", "Take B: mind the step.", "Take C: welcome aboard."]


def test_a_purge_at_the_center_travels_and_a_purge_on_the_edge_holds(tmp_path, keys):
    key, pub = keys
    edge = tmp_path / "edge"
    with serve(tmp_path / "center", config=center_config(tmp_path, key)) as center:
        a, b, c = (center.say(text).headers["x-cache-key"] for text in TEXTS)
        assert report(pull(edge, center.url, pub))["imported"] == 3

        cli("--cache-dir", str(center.cache_dir), "purge", "--key", a)
        after = pull(edge, center.url, pub)
        assert after.returncode == 0, after.stderr
        assert set(entry_files(edge)) == {b, c}  # the purge reached the edge
        assert report(after)["removed"] == [a] and report(after)["entries"] == 0

        cli("--cache-dir", str(edge), "purge", "--key", b)
        whole = pull(edge, center.url, pub, "--newer-than", "1d")  # no base: every take
        assert whole.returncode == 0, whole.stderr
        assert report(whole)["purged"] == [b] and report(whole)["complete"]
        assert set(entry_files(edge)) == {c}


@pytest.mark.parametrize("lie", ["another pack's bytes", "an older pack named"])
def test_neither_the_center_nor_the_way_can_hand_back_an_older_pack(tmp_path, keys, lie):
    """P1 (A, B, C) then P2 (D) are pulled; the edge purges A; then a pull is answered with
    P1 — its bytes in place of the pack asked for, or the center naming P1 as the pack it
    built. Before: P1 was imported and A came back (exit 0)."""
    key, pub = keys
    edge = tmp_path / "edge"
    with serve(tmp_path / "center", config=center_config(tmp_path, key)) as center:
        a, _, _ = (center.say(text).headers["x-cache-key"] for text in TEXTS)
        first = report(pull(edge, center.url, pub))
        old = httpx.get(f"{center.url}/v1/packs/{first['digest']}", timeout=30,
                        headers={"Authorization": f"Bearer {ADMIN}"}).content
        center.say("Take D: a newer pack.")
        assert report(pull(edge, center.url, pub))["imported"] == 1
        cli("--cache-dir", str(edge), "purge", "--key", a)
        held = set(entry_files(edge))

        center.say("Take E: so that the next pack is not empty.")
        with lying_proxy(center.url, lie, first["digest"], old) as proxy:
            attacked = pull(edge, proxy, pub, "--newer-than", "1d")
        assert set(entry_files(edge)) == held  # A did not come back, E did not come in
        assert attacked.returncode == 2, (attacked.stdout, attacked.stderr)
        assert "nothing was imported" in attacked.stderr
        assert ("asked for" if lie == "another pack's bytes" else "older") in attacked.stderr
        assert not list((edge / "packs" / "incoming").iterdir())

        honest = pull(edge, center.url, pub, "--newer-than", "1d")  # the next round is fine
        assert honest.returncode == 0, honest.stderr
        assert report(honest)["purged"] == [a]
        assert set(entry_files(edge)) == set(entry_files(center.cache_dir)) - {a}


def test_a_download_longer_than_the_pack_is_cut_off(tmp_path, keys):
    """The proxy sends the pack and then 64 MiB more, with no length: the edge stops at the
    size the center announced and keeps nothing (before: it wrote all of it)."""
    key, pub = keys
    edge = tmp_path / "edge"
    with serve(tmp_path / "center", config=center_config(tmp_path, key)) as center:
        for text in TEXTS:
            center.say(text)
        with lying_proxy(center.url, "endless", "", b"") as proxy:
            flooded = pull(edge, proxy, pub)
        assert flooded.returncode == 1 and "sent more than" in flooded.stderr, flooded.stderr
        held = sum(p.stat().st_size for p in (edge / "packs" / "incoming").iterdir())
        assert held < 1 << 20, held
        assert entry_files(edge) == {}
        again = pull(edge, center.url, pub)
        assert again.returncode == 0 and report(again)["imported"] == 3


def test_a_pending_pack_that_grew_old_is_asked_for_anew(tmp_path, keys):
    """A download cut short leaves pack X pending; a pull of another selection then takes a
    newer pack from the same key. X is now older than what the edge holds: the next pull
    of X drops it and asks for a new one in the same round (instead of failing)."""
    key, pub = keys
    edge = tmp_path / "edge"
    with serve(tmp_path / "center", config=center_config(tmp_path, key)) as center:
        for i in range(30):
            center.say(f"Announcement {i}: the train to the airport departs from platform "
                       f"{i % 9} in {i + 2} minutes; please mind the gap.")
        with cutting_proxy(center.port, cut_after=120_000) as (url, cuts):
            assert pull(edge, url, pub).returncode == 1 and cuts == [1]  # X: pending
            pending = json.loads(next((edge / "packs" / "pulls").glob("*.json")).read_bytes())
            other = pull(edge, url, pub, "--newer-than", "1d")  # a newer pack, same key
            assert other.returncode == 0 and report(other)["imported"] == 30
            resumed = pull(edge, url, pub)  # X again: its pending pack is now the older
        assert resumed.returncode == 0, resumed.stderr
        assert report(resumed)["digest"] != pending["pending"]
        assert report(resumed)["skipped"] == 30 and report(resumed)["complete"]
        assert not list((edge / "packs" / "incoming").iterdir())


@contextlib.contextmanager
def lying_proxy(target: str, lie: str, old_digest: str, old_pack: bytes) -> Iterator[str]:
    """An HTTP proxy to ``target`` that tells one lie about packs (see the module doc)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _forward(self, body: bytes | None) -> httpx.Response:
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() in ("authorization", "content-type", "range", "if-range")}
            return httpx.request(self.command, target + self.path, headers=headers,
                                 content=body, timeout=60)

        def _answer(self, status: int, body: bytes, headers: dict[str, str],
                    length: bool = True) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if length:
                self.send_header("Content-Length", str(len(body)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            upstream = self._forward(self.rfile.read(length))
            body = upstream.content
            if lie == "an older pack named" and upstream.status_code == 201:
                descriptor = json.loads(body)
                descriptor.update(digest=old_digest, url=f"/v1/packs/{old_digest}",
                                  size=len(old_pack))
                body = json.dumps(descriptor).encode()
            self._answer(upstream.status_code, body,
                         {"Content-Type": upstream.headers.get("content-type", "")})

        def do_GET(self) -> None:
            upstream = self._forward(None)
            kept = {k: v for k, v in upstream.headers.items()
                    if k.lower() in ("content-type", "etag", "content-range")}
            if lie == "another pack's bytes" and self.path.startswith("/v1/packs/"):
                self._answer(200, old_pack, {"Content-Type": "application/x-tar"})
            elif lie == "endless" and self.path.startswith("/v1/packs/"):
                self.close_connection = True
                self._answer(upstream.status_code, upstream.content + b"\0" * (64 << 20),
                             kept, length=False)
            else:
                self._answer(upstream.status_code, upstream.content, kept)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
