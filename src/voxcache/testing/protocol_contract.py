"""The contract every protocol keeps, route ↔ upstream, as a pytest class to subclass.

Subclass ``ProtocolContract``: set ``kind`` (an upstream kind) and give fixtures ``standin`` (a
running server speaking the protocol: ``Standin``) and ``cases`` (``Case``: a route call and the
same synthesis asked of the server); docs/internals/extending.md says more. A voxcache service
fronts the server through a TCP proxy, and the suite checks: a route answers exactly the server's
audio; a repeat is a hit that never reaches the server; distinct requests are distinct takes;
bad input is a 4xx that reaches nothing; a cut link is a 5xx that stores nothing.
"""

from __future__ import annotations

import io
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..config import Settings
from .proxies import TcpProxy
from .servers import serve_in_thread


@dataclass(frozen=True)
class Call:
    """One HTTP request: ``httpx`` keyword arguments (``json``, ``data``, ``files``,
    ``params``) beside the method and path."""

    method: str
    path: str
    options: dict[str, Any] = field(default_factory=dict)
    answer: str = "wav"
    """How its answer carries the audio: ``wav`` (a WAV file, streamed or not) or ``pcm``."""

    def send(self, client: httpx.Client) -> httpx.Response:
        return client.request(self.method, self.path, **self.options)


@dataclass(frozen=True)
class Case:
    """A request to the protocol's route, and the same synthesis asked of the server."""

    route: Call
    direct: Call


@dataclass
class Standin:
    """A running server that speaks the protocol (``url``) and what it has rendered."""

    url: str
    renders: Callable[[], int]
    """How many synthesis requests it has received so far (it may lag a little behind: a
    server's request log is written after its answer)."""

    def expect(self, count: int, wait: float = 10.0) -> None:
        """Wait until it has received ``count`` syntheses; then it must not have more."""
        deadline = time.monotonic() + wait
        while self.renders() < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.renders() == count, f"the server received {self.renders()}, not {count}"


def pcm_of(body: bytes, answer: str) -> bytes:
    """The PCM an answer carries (a WAV's frames; a streamed WAV's header claims none)."""
    if answer == "pcm":
        return body
    with wave.open(io.BytesIO(body)) as wav:
        offset = body.index(b"data", 12) + 8  # after the data chunk's id and size
        assert wav.getsampwidth() == 2, "a 16-bit WAV"
    return body[offset:]


@dataclass
class Gateway:
    """The service in front of the stand-in, and the link between them."""

    client: httpx.Client
    link: TcpProxy
    cache_dir: Path


class ProtocolContract:
    """What every protocol promises; subclasses set ``kind`` and provide ``standin`` and
    ``cases`` (and ``settings``/``bad_calls`` where the protocol needs them)."""

    kind: str = ""

    @pytest.fixture
    def standin(self) -> Standin:  # pragma: no cover - subclasses override
        raise NotImplementedError("provide a `standin` fixture")

    @pytest.fixture
    def cases(self) -> list[Case]:  # pragma: no cover - subclasses override
        raise NotImplementedError("provide a `cases` fixture: at least two distinct requests")

    @pytest.fixture
    def settings(self) -> dict[str, Any]:
        """More ``Settings`` fields (``reference_roots``, ``upstream_options``…)."""
        return {}

    @pytest.fixture
    def bad_calls(self) -> list[Call]:
        """Requests the route must refuse with a 4xx before asking the server anything."""
        return []

    @pytest.fixture
    def gateway(self, standin: Standin, settings: dict[str, Any],
                tmp_path: Path) -> Iterator[Gateway]:
        from ..service.app import create_app

        port = int(standin.url.rsplit(":", 1)[1].split("/")[0])
        settings = dict(settings)
        options = {"retries": 0, **settings.pop("upstream_options", {})}
        with TcpProxy(port) as link:
            config = Settings(cache_dir=tmp_path / "protocol-cache",
                              upstream=f"{self.kind}={link.endpoint}", upstream_timeout=30.0,
                              upstream_options=options, **settings)
            with serve_in_thread(create_app(config), lifespan="on") as url, \
                    httpx.Client(base_url=url, timeout=60) as client:
                yield Gateway(client, link, config.cache_dir)

    def test_a_route_answers_exactly_the_servers_audio(
            self, gateway: Gateway, standin: Standin, cases: list[Case]) -> None:
        with httpx.Client(base_url=standin.url, timeout=60) as direct:
            for case in cases:
                before = standin.renders()
                answer = case.route.send(gateway.client)
                assert answer.status_code == 200, answer.text
                assert answer.headers["x-cache"] == "MISS"
                standin.expect(before + 1)
                expected = case.direct.send(direct)
                assert expected.status_code == 200, expected.text
                standin.expect(before + 2)
                assert pcm_of(answer.content, case.route.answer) == \
                    pcm_of(expected.content, case.direct.answer)

    def test_a_repeat_is_a_hit_that_never_reaches_the_server(
            self, gateway: Gateway, standin: Standin, cases: list[Case]) -> None:
        before = standin.renders()
        first = cases[0].route.send(gateway.client)
        assert first.status_code == 200, first.text
        standin.expect(before + 1)
        again = cases[0].route.send(gateway.client)
        assert again.status_code == 200, again.text
        assert again.headers["x-cache"] == "HIT"
        standin.expect(before + 1)
        assert pcm_of(again.content, cases[0].route.answer) == \
            pcm_of(first.content, cases[0].route.answer)

    def test_distinct_requests_are_distinct_takes(
            self, gateway: Gateway, standin: Standin, cases: list[Case]) -> None:
        assert len(cases) >= 2, "give at least two distinct requests"
        before = standin.renders()
        takes = set()
        for case in cases:
            answer = case.route.send(gateway.client)
            assert answer.status_code == 200, answer.text
            takes.add((answer.headers["x-cache-key"], pcm_of(answer.content, case.route.answer)))
        assert len({key for key, _ in takes}) == len(cases)
        assert len({pcm for _, pcm in takes}) == len(cases)
        standin.expect(before + len(cases))

    def test_bad_input_is_a_4xx_that_reaches_nothing(
            self, gateway: Gateway, standin: Standin, bad_calls: list[Call]) -> None:
        before = standin.renders()
        for call in bad_calls:
            answer = call.send(gateway.client)
            assert 400 <= answer.status_code < 500, (call, answer.status_code, answer.text)
            assert answer.text, "a refusal says what to fix"
        standin.expect(before)

    def test_a_cut_link_is_a_5xx_that_stores_nothing(
            self, gateway: Gateway, standin: Standin, cases: list[Case]) -> None:
        route = cases[0].route
        before = standin.renders()
        gateway.link.blocked = True
        cut = route.send(gateway.client)
        assert cut.status_code in (502, 503, 504), (cut.status_code, cut.text)
        gateway.link.blocked = False
        standin.expect(before)
        back = route.send(gateway.client)
        assert back.status_code == 200, back.text
        assert back.headers["x-cache"] == "MISS"  # the failed render left nothing behind
        standin.expect(before + 1)
