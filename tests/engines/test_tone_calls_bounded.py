"""The tone engine's ``calls`` record is bounded: a soak server renders a new key per miss
for hours, and an unbounded list grew its heap with every one (issue 26's soak)."""

from __future__ import annotations

import pytest

from voxcache.engines import tone
from voxcache.request import SynthesisRequest, resolve


def test_calls_keep_the_most_recent_renders_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tone, "CALLS_KEPT", 8, raising=False)  # absent before the bound
    engine = tone.ToneEngine()
    texts = [f"Distinct phrase number {n}." for n in range(50)]
    for text in texts:
        list(engine.render(resolve(SynthesisRequest(text=text), engine)))
    assert engine.calls == texts[-8:]  # bounded, newest kept, still a list tests can compare
