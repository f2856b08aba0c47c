"""The edge of the service under attack: bodies over the limit or trickled, idle and slowloris
connections, oversized headers — against `voxcache serve` itself, over raw sockets.

Every server here is the real subprocess (`serve_process`), configured through the
environment (``VOXCACHE_SERVICE_*``), so the same tests run against an older voxcache
(which ignores the new settings) and show what it did.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

BODY_LIMIT = 4096
HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
CLOSE_BOUND = 8.0
"""Generous bound for "closed within": several times the 1 s timeouts configured."""
SETTINGS = {"VOXCACHE_SERVICE_MAX_BODY_BYTES": str(BODY_LIMIT),
            "VOXCACHE_SERVICE_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
            "VOXCACHE_SERVICE_BODY_TIMEOUT": str(BODY_TIMEOUT)}


_LEFTOVER: dict[int, bytes] = {}
"""Bytes read past the end of a response, per socket (pipelined answers can share a read)."""


@pytest.fixture(scope="module")
def server(serve_proc, tmp_path_factory) -> Iterator[str]:
    """One `voxcache serve` (tone engine) with a 4 KB body limit and 1 s header/body timeouts."""
    with serve_proc(tmp_path_factory.mktemp("edge") / "cache", env=SETTINGS) as (url, _proc):
        yield url


def connect(url: str, timeout: float = CLOSE_BOUND + 4) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    _LEFTOVER.pop(sock.fileno(), None)  # a closed socket's number may come back
    return sock


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes; and how long that took. A server that
    never closes makes ``recv`` time out (the socket's timeout), which fails the test."""
    started = time.monotonic()
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - started


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with Content-Length (what every answer here carries)."""
    data = _LEFTOVER.pop(sock.fileno(), b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in
               (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", 0))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    _LEFTOVER[sock.fileno()] = rest[length:]
    return status, headers, rest[:length]


def trickle(sock: socket.socket, data: bytes) -> tuple[bytes, float]:
    """Send ``data`` a byte every 0.1 s until the server answers or closes; then read the
    rest of what it sends until it closes. Returns what it sent and when it first answered."""
    sock.settimeout(0.1)
    started, received = time.monotonic(), b""
    for byte in data:
        if time.monotonic() - started > CLOSE_BOUND + 2:
            break
        try:
            sock.send(bytes([byte]))
            received = sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        break  # an answer, or the end of the connection
    elapsed = time.monotonic() - started
    sock.settimeout(CLOSE_BOUND)
    if received:
        received += read_until_closed(sock)[0]
    return received, elapsed


def speech_json(text: str) -> bytes:
    return json.dumps({"input": text, "response_format": "wav"}).encode()


# ---- bodies ----------------------------------------------------------------------------------

def test_a_chunked_body_over_the_limit_is_413_with_the_json_error(server: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"input": "'
        for _ in range(16):
            yield b"a" * 512
        yield b'"}'

    response = httpx.post(f"{server}/v1/audio/speech", content=chunks(), timeout=30,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "PayloadTooLarge" and f"{BODY_LIMIT} bytes" in error["message"]


def test_the_413_comes_as_soon_as_the_body_is_over_not_at_its_end(server: str) -> None:
    """The client sends one chunk past the limit and then nothing: the answer must not wait
    for a body end that never comes."""
    with connect(server) as sock:
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\n" % (BODY_LIMIT + 1) + b"a" * (BODY_LIMIT + 1) + b"\r\n")
        status, _headers, body = read_response(sock)
    assert status == 413 and json.loads(body)["error"]["code"] == "PayloadTooLarge"


def test_a_chunked_body_under_the_limit_reaches_the_route_whole(server: str) -> None:
    payload = speech_json("Chunked but small.")
    parts = [payload[i:i + 7] for i in range(0, len(payload), 7)]
    response = httpx.post(f"{server}/v1/audio/speech", content=iter(parts), timeout=30,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.content[:4] == b"RIFF"


def test_a_body_exactly_at_the_limit_is_accepted(server: str) -> None:
    payload = speech_json("Exactly at the limit.")
    payload = payload[:-1] + b" " * (BODY_LIMIT - len(payload)) + b"}"
    assert len(payload) == BODY_LIMIT
    response = httpx.post(f"{server}/v1/audio/speech", content=iter([payload]), timeout=30,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text


def test_a_get_with_a_body_is_held_to_the_limit_too(server: str) -> None:
    """CosyVoice's routes take their form on GET as well: a GET body is a body."""
    form = b"spk_id=alto&tts_text=" + b"a" * (2 * BODY_LIMIT)
    response = httpx.request("GET", f"{server}/inference_sft", content=iter([form]), timeout=30,
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 413, response.text[:200]


def test_a_trickled_body_gets_408_and_the_connection_closes(server: str) -> None:
    """Content-Length 200, then a byte every 0.2 s: the body deadline (1 s) answers 408."""
    with connect(server) as sock:
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{")
        received, elapsed = trickle(sock, b" " * 199)
    assert received.startswith(b"HTTP/1.1 408"), received[:200]
    assert b"connection: close" in received.lower()
    assert b"did not arrive within 1 s" in received
    assert elapsed < CLOSE_BOUND


# ---- connections -----------------------------------------------------------------------------

def test_an_idle_connection_is_closed(server: str) -> None:
    with connect(server) as sock:
        data, elapsed = read_until_closed(sock)
    assert data == b"" and elapsed < CLOSE_BOUND


def test_slowloris_headers_get_408_and_are_closed(server: str) -> None:
    """Headers one byte every 0.1 s: each byte would restart uvicorn's own idle timer."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 10_000
    with connect(server) as sock:
        received, elapsed = trickle(sock, request)
    assert received.startswith(b"HTTP/1.1 408"), received[:200]
    assert b"request headers did not arrive within 1 s" in received
    assert elapsed < CLOSE_BOUND


def test_oversized_headers_get_431(server: str) -> None:
    with connect(server) as sock:
        # the server may close before all of it is sent
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                         + b"".join(b"X-Filler-%d: %s\r\n" % (i, b"b" * 1000)
                                    for i in range(200)))
        data, _elapsed = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 431"), data[:200]


def test_a_keep_alive_client_is_unaffected(server: str) -> None:
    """Requests on one connection, pauses shorter than the deadline between them, and a render
    that takes longer than the header deadline: all answered on the same socket."""
    slow = json.dumps({"input": "Slow one.", "response_format": "wav",
                       "params": {"delay": 2 * HEADER_TIMEOUT}}).encode()
    with connect(server) as sock:
        for body in (speech_json("First."), slow, speech_json("After the slow one.")):
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            status, headers, audio = read_response(sock)
            assert status == 200 and audio[:4] == b"RIFF"
            assert headers.get("connection", "keep-alive") != "close"
            time.sleep(HEADER_TIMEOUT / 2)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3)  # pipelined
        assert [read_response(sock)[0] for _ in range(3)] == [200] * 3
        data, elapsed = read_until_closed(sock)  # and then idle: closed
    assert data == b"" and elapsed < CLOSE_BOUND


def test_every_worker_of_a_multi_process_server_closes_idle_connections(serve_proc,
                                                                        tmp_path) -> None:
    """`--workers` hands uvicorn's config to each worker process: the protocol must survive."""
    with serve_proc(tmp_path / "cache", "--workers", "2", env=SETTINGS) as (url, _proc):
        socks = [connect(url) for _ in range(4)]  # spread over the workers
        try:
            results = [read_until_closed(sock) for sock in socks]
        finally:
            for sock in socks:
                sock.close()
        assert httpx.get(f"{url}/healthz").status_code == 200
    assert all(data == b"" and elapsed < CLOSE_BOUND for data, elapsed in results)


def test_a_clip_compared_with_a_voice_has_the_upload_limit(make_app) -> None:
    """Compare carries a clip: it used to be capped at the JSON body limit (1 MB)."""
    from fastapi.testclient import TestClient

    client = TestClient(make_app()[0])
    clip = b"\0" * (2 << 20)
    voice = "vc_" + "0" * 24
    compared = client.post(f"/v1/voices/{voice}/compare", files={"file": ("c.wav", clip)})
    assert compared.status_code == 404  # past the size check: the voice does not exist
    json_route = client.post("/v1/synthesize", content=clip,
                             headers={"Content-Type": "application/json"})
    assert json_route.status_code == 413
