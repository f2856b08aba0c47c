"""What serving a request produces: a ``Result`` (whole), or a ``Take`` (whole or arriving).

``Progress`` is how the synchronous path tells a streaming caller what is
happening while it happens: how the take is being served (``begin``) and each
chunk of audio as it exists, in order (``chunk``). The orchestrator and the
policies report to it; the asyncio form of the orchestrator turns it into a
``Take`` whose audio arrives over time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Protocol

from .audio import Audio
from .entry import Entry
from .vocabulary import Outcome


@dataclass(frozen=True, slots=True)
class Result:
    """A take and how it was served."""

    entry: Entry
    key: str
    cache: Outcome
    """``hit``, ``miss``, ``joined`` (another caller's render was shared), ``partial``
    (some sentences cached, the rest rendered), ``stale`` (an older model's take,
    re-rendering in the background) or ``bypass`` (rendered, not stored)."""
    tier: str
    """``memory``, ``disk``, ``segments`` (stitched from stored sentences) or ``engine``."""
    seconds: float
    stored: bool = True
    """False when the take could not be cached (disk full) and was served anyway."""
    segments_hit: int = 0
    """Segment mode: sentences served from the cache (0 when the request stayed whole)."""
    segments_rendered: int = 0
    """Segment mode: sentences this request had the engine render."""
    take: int | None = None
    """Under a ``variants:N`` seed policy, which of the N takes this is."""
    reason: str = ""
    """Why the take was not stored, when the storing gate refused it: ``admission:<class>``
    (a text rule), ``admission:admit_after`` (too few distinct callers yet) or
    ``quality:<reason>`` (``policies.admit``); never the text itself."""

    def published(self, entry: Entry, stored: bool, seconds: float) -> Result:
        """This result once published: the key's take (``entry``), whether it is stored,
        and the time it took (built directly: ``dataclasses.replace`` costs ~4 µs)."""
        return Result(entry, self.key, self.cache, self.tier, seconds, stored,
                      self.segments_hit, self.segments_rendered, self.take)

    @property
    def audio(self) -> Audio:
        """The take as canonical PCM."""
        return self.entry.audio()

    @property
    def wav(self) -> bytes:
        """The take as a WAV file (the stored bytes, envelope chunk included)."""
        return self.entry.blob


class Progress(Protocol):
    """Told, while a request is served, what a streaming caller needs before the end."""

    def begin(self, cache: Outcome, tier: str, segments: tuple[int, int] | None = None,
              reason: str = "") -> None:
        """How the take is being served, said once before its first chunk (``reason``: why
        it will not be stored, when that is known before it exists)."""

    def chunk(self, audio: Audio) -> None:
        """The next piece of the take, in order."""


class _Silent:
    """A caller that does not stream."""

    def begin(self, cache: Outcome, tier: str, segments: tuple[int, int] | None = None,
              reason: str = "") -> None:
        return None

    def chunk(self, audio: Audio) -> None:
        return None


NO_PROGRESS: Progress = _Silent()


@dataclass(slots=True)
class Take:
    """A request being served, in the asyncio form: how it is served and its audio —
    whole (``result``) or arriving as it is rendered (``source``)."""

    key: str
    cache: Outcome
    """How it is served (``cache.header`` is the X-Cache header)."""
    tier: str
    sample_rate: int
    channels: int
    result: Result | None = None
    source: AsyncIterator[Audio] | None = None
    segments: tuple[int, int] | None = None
    """Segment mode: (sentences from the cache, sentences rendered) for this request."""
    reason: str = ""
    """Why the take is not stored (``Result.reason``; the ``X-Cache-Reason`` header)."""

    @classmethod
    def whole(cls, result: Result) -> Take:
        """A take served whole."""
        header = result.entry.header
        split = result.segments_hit + result.segments_rendered
        return cls(result.key, result.cache, result.tier, header.sample_rate,
                   header.channels, result=result,
                   segments=(result.segments_hit, result.segments_rendered) if split else None,
                   reason=result.reason)

    @property
    def entry(self) -> Entry | None:
        """The stored take, when it is whole."""
        return None if self.result is None else self.result.entry

    @property
    def streaming(self) -> bool:
        """True when the audio arrives over time."""
        return self.source is not None

    async def chunks(self, timeout: float | None = None) -> AsyncIterator[Audio]:
        """The take's audio: at once when whole, else as it is rendered (each chunk within
        ``timeout`` seconds of the last)."""
        if self.source is None:
            assert self.result is not None
            yield self.result.entry.audio()
            return
        while True:
            try:
                chunk = await asyncio.wait_for(anext(self.source), timeout)
            except StopAsyncIteration:
                return
            yield chunk


def seconds_since(started: float) -> float:
    """Wall time since ``started`` (a ``time.perf_counter()`` reading)."""
    return time.perf_counter() - started


def in_order(arrivals: Iterator[tuple[int, Audio]], count: int) -> Iterator[Audio]:
    """Reorder (index, audio) arrivals into index order (sentences that arrive early wait)."""
    waiting: dict[int, Audio] = {}
    following = 0
    for index, audio in arrivals:
        waiting[index] = audio
        while following in waiting:
            yield waiting.pop(following)
            following += 1
    if following != count:
        raise RuntimeError(f"{count - following} part(s) of the take never arrived")


class Observer(Protocol):
    """Who wants to hear about hits and renders (the service's metrics)."""

    def hit(self, tier: str, entry: Entry) -> None:
        """A take was served from ``tier``."""

    def rendered(self, seconds: float, failed: bool) -> None:
        """The engine ran for ``seconds`` (and failed, or not)."""


class Unobserved:
    """An observer that hears nothing (a library user's default)."""

    def hit(self, tier: str, entry: Entry) -> None:
        return None

    def rendered(self, seconds: float, failed: bool) -> None:
        return None
