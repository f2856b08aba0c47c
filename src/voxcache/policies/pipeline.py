"""What a policy may ask of the orchestrator: look up, render once, store, record.

Policies (seed takes, segments, model upgrades, usage) decide *what* a request
gets; the orchestrator (``voxcache.cached.CachedEngine``) owns *how* anything is
looked up, rendered or stored. A policy depends on this protocol only — never
on the orchestrator's class or its private methods — so the orchestrator can
import the policies without an import circle, and a policy can be tested
against any pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..audio import Audio
from ..engine import Engine
from ..entry import Entry
from ..loading import Loader
from ..outcome import Progress, Result
from ..resolved import ResolvedRequest
from ..singleflight import FlightGroup


class Pipeline(Protocol):
    """The orchestrator, as the policies see it."""

    engine: Engine
    flights: FlightGroup
    """In-process single flight (segment mode leads several keys in one engine call)."""
    lock_wait: float
    """Longest wait for another caller's render or lock (seconds)."""
    loader: Loader
    """The load-once path (a policy's own artifacts, such as the learned join pauses)."""
    waveform: frozenset[str]
    """The engine parameters that shape the waveform (what a key covers)."""

    def key_of(self, resolved: ResolvedRequest) -> str:
        """The content address of a resolved request's audio."""

    def key_payload(self, resolved: ResolvedRequest, kind: str = "audio") -> dict[str, Any]:
        """What ``key_of`` hashes (a policy may extend it, e.g. with a segment's context)."""

    def lookup(self, key: str) -> tuple[Entry, str] | None:
        """(entry, tier) from the fastest tier holding ``key`` (promoted upwards)."""

    def lock(self, key: str) -> AbstractContextManager[bool]:
        """The key's cross-process lock; yields False when it could not be had in time."""

    def render(self, resolved: ResolvedRequest) -> Iterator[Audio]:
        """The engine's chunks for ``resolved``, rendered in a render slot and counted."""

    def store(self, entry: Entry, resolved: ResolvedRequest) -> tuple[Entry, bool]:
        """Publish a sealed take: (the key's take now — ours, or the one published first
        — and whether it is stored)."""

    def seal(self, key: str, audio: Audio, resolved: ResolvedRequest, **meta: Any) -> Entry:
        """The take's stored form, not yet written anywhere."""

    def render_once(self, resolved: ResolvedRequest, key: str, started: float,
                    progress: Progress, join: bool = True) -> Result:
        """Render ``key`` once however many ask (flight, lock, slot, publication)."""

    def hit(self, resolved: ResolvedRequest, key: str, found: tuple[Entry, str],
            started: float) -> Result:
        """A take found in a tier, counted and recorded as a hit."""

    def count(self, name: str, delta: int = 1) -> None:
        """Add to a cache counter."""

    def asked(self, resolved: ResolvedRequest, key: str, hit: bool,
              kind: str = "request") -> None:
        """Record one ask of ``key`` in the usage analytics."""

    def remember(self, resolved: ResolvedRequest, key: str) -> None:
        """Remember ``key`` as the latest take of its request across model revisions."""

    def served(self, resolved: ResolvedRequest, entry: Entry) -> None:
        """A stored take served: its characters and engine seconds go to the savings ledger."""

    def refusal(self, key: str, resolved: ResolvedRequest, caller: str | None,
                audio: Audio | None = None) -> str | None:
        """Why a take of ``key`` may not be stored (the storing gate; counted), or None."""

    def text_refusal(self, resolved: ResolvedRequest) -> str | None:
        """``admission:<class>`` when the tenant never stores this text (no side effect)."""
