"""Stage caches: what voice cloning computes before the waveform, cached by content.

- ``StageCache`` / ``stage_cached``: any function of a reference clip (``cache``);
- ``SpeakerEncoder`` / ``same_speaker``: resemblyzer embeddings (``embeddings``, extra
  ``[embeddings]``);
- ``CosyVoicePrompts`` / ``GPTSoVITSPrompts``: the engines' own prompt caches made
  persistent and shared (``protocols.cosyvoice.prompts``, ``protocols.gpt_sovits.prompts``);
- ``TokenTakes``: autoregressive output per segment, re-decoded without generation
  (``tokens``);
- ``SessionStates``: decoder prefix state per session and per voice, memory only
  (``sessions``).

Design and figures: docs/internals/stages.md.
"""

from __future__ import annotations

from .cache import Artifact, StageCache, StageResult, stage_cached
from .clip import Clip
from .keys import StageInputs, voice_anchor

__all__ = ["Artifact", "Clip", "StageCache", "StageInputs", "StageResult", "stage_cached",
           "voice_anchor"]
