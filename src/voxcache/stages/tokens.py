"""Token takes: an engine's autoregressive output per segment, kept as a "frozen take".

CosyVoice, GPT-SoVITS and XTTS apply speed after their autoregressive stage, and
the output format after that (engines.md §0.1.4), so the tokens a language model
generated for one segment can be decoded again at another speed, into another
format, or through a new vocoder, without generating again — and without a new
sample of the model's randomness. The key is the audio key's inputs *minus* the
parameters only the decoder reads, plus the generator's revision (the vocoder's is
not in it: tokens outlive a vocoder change).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .cache import StageCache, StageResult
from .keys import DEFAULT_TENANT, StageInputs

DECODE_ONLY = frozenset({"speed", "speed_factor", "fragment_interval", "response_format",
                         "media_type", "format", "bitrate", "sample_rate"})
"""Parameters the engines named in engines.md read after the autoregressive stage. An
engine adapter passes its own set when it differs (F5-TTS: none — speed changes its
duration estimate, so nothing is reusable there)."""


def generation_params(params: Mapping[str, Any],
                      decode_only: Iterable[str] = DECODE_ONLY) -> dict[str, Any]:
    """``params`` without the parameters only the decoder reads."""
    dropped = frozenset(decode_only)
    return {name: value for name, value in params.items() if name not in dropped}


class TokenTakes:
    """Token takes of one generator (an engine's LLM/T2S stage at one revision)."""

    def __init__(self, stages: StageCache, generator: str, revision: str,
                 decode_only: Iterable[str] = DECODE_ONLY) -> None:
        self.stages = stages
        self.generator = generator
        self.revision = revision
        self.decode_only = frozenset(decode_only)

    def inputs(self, segment: str, params: Mapping[str, Any], *, reference: str = "",
               prompt_text: str = "", language: str = "",
               tenant: str = DEFAULT_TENANT) -> StageInputs:
        """What the tokens of one segment depend on."""
        kept = generation_params(params, self.decode_only)
        return StageInputs("tokens", self.generator, self.revision, reference, tenant,
                           prompt_text, language, {"segment": segment, **kept})

    def take(self, segment: str, params: Mapping[str, Any],
             generate: Callable[[], Any], **scope: Any) -> StageResult:
        """The tokens for ``segment``; ``generate()`` runs only when no tier has them.
        ``scope``: ``reference``, ``prompt_text``, ``language``, ``tenant``."""
        return self.stages.get_or_compute(self.inputs(segment, params, **scope),
                                          lambda: {"tokens": np.asarray(generate())})
