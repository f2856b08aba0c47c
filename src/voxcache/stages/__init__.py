"""Stage caches: what voice cloning computes before the waveform, cached by content.

``StageCache`` / ``stage_cached`` (any function of a reference clip), ``SpeakerEncoder``
(resemblyzer embeddings, extra ``[embeddings]``), the engines' prompt caches
(``protocols.cosyvoice.prompts``, ``protocols.gpt_sovits.prompts``), ``TokenTakes``
(autoregressive output per segment) and ``SessionStates`` (decoder prefix state, memory
only). Design and figures: docs/internals/stages.md.
"""

from __future__ import annotations

from .cache import Artifact, StageCache, StageResult, stage_cached
from .clip import Clip
from .keys import StageInputs, voice_anchor

__all__ = ["Artifact", "Clip", "StageCache", "StageInputs", "StageResult", "stage_cached",
           "voice_anchor"]
