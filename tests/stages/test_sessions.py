"""Session and prefix state: memory only, evicted first, and exact on a real transformer."""

from __future__ import annotations

import numpy as np
import pytest

from voxcache.cache import Cache
from voxcache.stages import StageCache, StageInputs
from voxcache.tensors import tensor_entry
from voxcache.tiers.memory import MemoryTier

torch = pytest.importorskip("torch", reason="needs the [embeddings] extra (torch)")


def entry(kind: str, index: int, size: int = 1000):
    return tensor_entry(f"{kind[:2]}{index:062x}", kind, {"x": np.zeros(size // 4, np.float32)})


def test_over_the_total_budget_sessions_go_before_embeddings():
    tier = MemoryTier(total_budget=12_000)
    for i in range(4):
        tier.put(entry("embedding", i))
    for i in range(4):
        tier.put(entry("session", i))
    assert tier.put(entry("embedding", 9))  # pushes the tier over its total
    held = tier.stats()
    assert held["embedding"]["entries"] == 5, held
    assert held["session"]["entries"] < 4
    for i in range(12):  # more pressure: every session goes before any embedding does
        tier.put(entry("prompt", i))
        held = tier.stats()
        if held["embedding"]["entries"] < 5:
            assert held.get("session", {}).get("entries", 0) == 0
    assert tier.stats()["embedding"]["entries"] < 5  # the pressure did reach embeddings


def test_the_bound_applies_to_a_running_cache(cache: Cache, stages: StageCache):
    for i in range(3):
        stages.get_or_compute(StageInputs("embedding", "e", "1", f"{i:064x}", "t"),
                              lambda: np.ones(256, np.float32))
    session = StageInputs("session", "m", "1", "", "t", params={"session": "s"})
    stages.put(session, {"k0": np.zeros(4096, np.float64)})
    cache.in_process.limit_total(cache.in_process.stats()["embedding"]["bytes"] + 1000)
    assert not cache.in_process.contains(session.key(), "session")
    assert cache.in_process.stats()["embedding"]["entries"] == 3


def test_session_state_never_reaches_the_disk(cache: Cache, stages: StageCache):
    session = StageInputs("session", "m", "1", "a" * 64, "t", params={"session": "s1"})
    stages.put(session, {"k0": np.zeros(64, np.float64)})
    assert stages.lookup(session.key(), "t", "session") is not None
    assert stages.lookup(session.key(), "other", "session") is None
    assert not list((cache.root / "objects").rglob("*"))


TURNS = ["What's the weather like today in the city?", "And tomorrow?",
         "Should I bring an umbrella on Thursday?"]


def test_reused_prefix_state_gives_exactly_the_tokens_of_a_full_run(stages: StageCache):
    from voxcache.stages.sessions import SessionStates
    from voxcache.stages.tiny_decoder import Conversation, TinyDecoder

    torch.set_num_threads(1)
    model = TinyDecoder(width=64, layers=2, heads=2)
    states = SessionStates(stages, "tiny", model.revision)
    voice = list(range(256, 320)) * 2
    kept = Conversation(model, states, "s1", voice, voice="f" * 64, per_turn=12)
    fresh = Conversation(model, None, "s1", voice, per_turn=12)
    for text in TURNS:
        assert kept.say(text)[0] == fresh.say(text)[0]
    assert kept.reused == ["voice", "session", "session"]
    assert fresh.reused == ["none", "none", "none"]
    # the cost: positions read before generating; the full run re-reads the whole history
    assert kept.read[1:] == [len(t.encode()) for t in TURNS[1:]]
    assert all(k < f for k, f in zip(kept.read[1:], fresh.read[1:], strict=True))
    # a second session in the same voice starts from the voice's prefix state
    other = Conversation(model, states, "s2", voice, voice="f" * 64, per_turn=12)
    other.say(TURNS[0])
    assert other.read == [len(TURNS[0].encode())]
    # an edited history never continues from the wrong past
    branched = Conversation(model, states, "s1", voice, voice="f" * 64, per_turn=12)
    branched.say("A different first question?")
    branched.say(TURNS[1])
    assert branched.reused == ["voice", "session"]
    baseline = Conversation(model, None, "s1", voice, per_turn=12)
    baseline.say("A different first question?")
    assert branched.history[-12:] == baseline.say(TURNS[1])[0]
