"""A hostile upstream or center behind a real ``voxcache serve``: answers that trickle, never
end, or announce two gigabytes (``hostile``: a raw-socket server in its own process).

For each kind that reads an upstream's answer — an edge's center (``voxcache``), an
OpenAI-compatible server, Piper's HTTP server — what the operator set holds:

- a whole answer takes at most ``upstream_timeout`` seconds, however its bytes trickle in
  (body or headers), so the render slot it holds is free again after it and the miss
  queued behind it is served;
- SIGTERM while a call hangs: the process is gone within ``[service] shutdown_grace``,
  the hung caller told 503 to retry;
- an answer over ``max_answer_bytes`` (128 MiB by default) is refused — before a byte of
  it is read when its length is declared — and the process's memory is back where it was.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.packs.nodes import Node, serve, write_config

from .servers import HostileServer, hostile_server, wait_until

KINDS = ("voxcache", "openai", "piper-http")
LIMIT = 128 * 2**20  # the default max_answer_bytes
MB = 2**20


def say(node: Node, kind: str, text: str, timeout: float = 30,
        native: bool = False) -> httpx.Response:
    """A miss as the kind's clients send it (the native route for an edge, or when
    ``native``: whole, so a failure is a status with a message, never a cut stream)."""
    if kind == "openai" and not native:
        return httpx.post(f"{node.url}/v1/audio/speech", timeout=timeout,
                          json={"input": text, "response_format": "wav"})
    return httpx.post(f"{node.url}/v1/synthesize", timeout=timeout,
                      json={"text": text, "response_format": "wav"})


def in_background(call: Callable[[], httpx.Response]) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        try:
            result["response"] = call()
        except httpx.HTTPError as exc:  # pragma: no cover - reported by the assertion
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def hanging(upstream: HostileServer, text: str) -> None:
    """Wait until the upstream is answering ``text`` with its hostile part: a center trickles
    the fetch by key (the GET after the render) or the render's own headers (slowhead)."""
    def begun() -> bool:
        return any(call["text"] == text and not (call["path"] == "/v1/synthesize" and
                                                 text.startswith("trickle"))
                   for call in upstream.log())

    wait_until(begun, limit=30, what=f"the upstream to answer {text!r}")


def memory_mb(pid: int, field: str = "VmRSS") -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore


@pytest.mark.parametrize("kind", KINDS)
def test_a_trickling_answer_ends_at_its_deadline_and_sigterm_cuts_a_hung_one(
        tmp_path: Path, kind: str) -> None:
    config = write_config(tmp_path / "voxcache.toml",
                          "upstream_timeout = 3\n\n[service]\nshutdown_grace = 1\n")
    with hostile_server(tmp_path / "hostile") as upstream, \
            serve(tmp_path / "cache", "--upstream", f"{kind}={upstream.url}",
                  config=config) as node:
        outcomes = {}
        for mode in ("trickle", "slowhead"):  # a byte every 2 s: of the body, of the headers
            text = f"{mode} for ever"
            slow, result = in_background(lambda text=text: say(node, kind, text))
            hanging(upstream, text)
            # another phrase, queued behind the only render slot the hostile answer holds
            other = say(node, kind, f"Doors closing, {mode}.")
            slow.join(30)
            outcomes[mode] = (result, other)

        hung, result = in_background(lambda: say(node, kind, "trickle again"))
        hanging(upstream, "trickle again")
        asked = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(timeout=20)  # landed code: still up after a minute
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not stop the server while an upstream call hung")
        stopped_after = time.monotonic() - asked
        hung.join(10)

    for mode, (slow, other) in outcomes.items():
        assert other.status_code == 200 and other.headers["x-cache"] == "MISS", (mode, other.text)
        answer = slow["response"]
        assert answer.status_code == 502, (mode, answer.text)
        assert "within 3 s" in answer.json()["error"]["message"]
    cut = result["response"]
    assert cut.status_code == 503 and cut.headers["retry-after"] == "1", cut.text
    assert "shutting down" in cut.json()["error"]["message"]
    print(f"{kind}: stopped {stopped_after:.2f} s after SIGTERM (shutdown_grace 1 s)")


@pytest.mark.parametrize("kind", KINDS)
def test_an_oversized_answer_is_refused_and_its_memory_given_back(tmp_path: Path,
                                                                  kind: str) -> None:
    with hostile_server(tmp_path / "hostile") as upstream, \
            serve(tmp_path / "cache", "--upstream", f"{kind}={upstream.url}") as node:
        pid = node.proc.pid
        assert say(node, kind, "Doors closing.").status_code == 200
        start, start_peak = memory_mb(pid), memory_mb(pid, "VmHWM")

        declared = say(node, kind, "huge: Content-Length 2147483648", native=True)
        declared_peak = memory_mb(pid, "VmHWM")
        endless = [in_background(lambda n=n: say(node, kind, f"endless {n}", native=True))
                   for n in range(3)]
        for thread, _ in endless:
            thread.join(60)
        after, peak = memory_mb(pid), memory_mb(pid, "VmHWM")
        served = say(node, kind, "Mind the gap.")
        if kind == "openai":  # streamed as it arrives, so refused mid-body: cut off
            with pytest.raises(httpx.RemoteProtocolError):
                say(node, kind, "endless, streamed")

    assert declared.status_code == 502
    assert "announced 2147483648 bytes" in declared.json()["error"]["message"]
    assert declared_peak - start_peak < 16, "a declared length over the limit was read"
    for _, result in endless:
        refused = result["response"]
        assert refused.status_code == 502
        assert f"sent more than {LIMIT} bytes" in refused.json()["error"]["message"]
    assert peak - start < 3 * LIMIT / MB, "three endless answers held more than 3 limits"
    assert after - start < 32, f"{after - start:.0f} MB kept after the refusals"
    assert served.status_code == 200 and served.headers["x-cache"] == "MISS"
    print(f"{kind}: RSS {start:.0f} MB before, peak {peak:.0f} MB during 3 endless answers "
          f"(limit {LIMIT // MB} MiB each), {after:.0f} MB after")
