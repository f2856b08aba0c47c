"""Token takes: the same take re-decoded at another speed or by a new vocoder skips generation."""

from __future__ import annotations

import numpy as np
import pytest

from voxcache.stages import StageCache
from voxcache.stages.tokens import TokenTakes

torch = pytest.importorskip("torch", reason="needs the [embeddings] extra (torch)")


def vocode(tokens: np.ndarray, speed: float, revision: int = 1) -> np.ndarray:
    """A decoder stand-in: each token becomes a short tone; speed stretches time."""
    step = int(160 / speed)
    t = np.arange(step) / 16000
    return np.concatenate([np.sin(2 * np.pi * (100 + 5 * int(k)) * revision * t)
                           for k in tokens]).astype(np.float32)


def test_another_speed_or_vocoder_reuses_the_generated_tokens(stages: StageCache):
    from voxcache.stages.tiny_decoder import TinyDecoder, text_tokens

    torch.set_num_threads(1)
    model = TinyDecoder(width=64, layers=2, heads=2, seed=3)
    takes = TokenTakes(stages, "tiny-t2s", model.revision)
    generated: list[str] = []

    def say(segment: str, **params):
        def generate():
            generated.append(segment)
            return model.generate(text_tokens(segment), 20)[0]
        take = takes.take(segment, params, generate, reference="a" * 64, tenant="t")
        return take, vocode(take.artifact["tokens"], params.get("speed", 1.0),
                            params.get("vocoder", 1))

    first, audio = say("Doors closing.", speed=1.0, temperature=0.7)
    again, faster = say("Doors closing.", speed=1.5, temperature=0.7)
    assert (first.cache, again.cache, generated) == ("miss", "hit", ["Doors closing."])
    assert len(faster) < len(audio)  # decoded again, at the new speed
    assert np.array_equal(first.artifact["tokens"], again.artifact["tokens"])
    say("Doors closing.", speed=1.0, temperature=0.9)  # a sampling change is a new take
    assert generated == ["Doors closing."] * 2
    say("Mind the gap.", speed=1.0, temperature=0.7)
    assert len(generated) == 3


def test_decode_only_parameters_are_dropped_from_the_key(stages: StageCache):
    takes = TokenTakes(stages, "t2s", "1")
    base = takes.inputs("Hello.", {"top_k": 5, "speed": 1.0})
    assert takes.inputs("Hello.", {"top_k": 5, "speed": 2.0, "media_type": "ogg"}) == base
    assert takes.inputs("Hello.", {"top_k": 6}).key() != base.key()
    assert TokenTakes(stages, "t2s", "2").inputs("Hello.", {"top_k": 5}).key() != base.key()
