"""CosyVoice's zero-shot prompt (what ``spk2info`` holds), persistent and keyed by content.

``frontend_zero_shot`` extracts the prompt's text and speech tokens, mel features and speaker
embedding on every call without a speaker id; CosyVoice's own ``add_zero_shot_spk`` is in memory and
reused by name whatever the prompt (CosyVoice#1400). ``CosyVoicePrompts.install(frontend)`` takes
that prompt part from the stage cache, keyed by the clip's PCM, the prompt text, the resample rate,
the tenant and the revision (docs/internals/stages.md); calls with a speaker id are left alone.
"""

from __future__ import annotations

import threading
from typing import Any

from ...stages.cache import StageCache, StageResult
from ...stages.engine_clips import clip_of
from ...stages.keys import DEFAULT_TENANT, StageInputs

EXTRACTOR = "cosyvoice.frontend_zero_shot"
PER_SENTENCE = ("text", "text_len")
"""What ``frontend_zero_shot`` adds per sentence; everything else is the prompt's."""


class CosyVoicePrompts:
    """The prompt half of ``frontend_zero_shot``, shared through a ``StageCache``."""

    def __init__(self, stages: StageCache, revision: str, tenant: str = DEFAULT_TENANT) -> None:
        self.stages = stages
        self.revision = revision
        """The frontend's revision: the CosyVoice commit and its model files' hashes."""
        self.tenant = tenant
        self.extractions = 0
        """Prompt extractions that really ran (what a test counts)."""
        self._lock = threading.Lock()

    def install(self, frontend: Any) -> Any:
        """Route ``frontend.frontend_zero_shot`` through the cache; return the frontend."""
        original = frontend.frontend_zero_shot

        def frontend_zero_shot(tts_text: Any, prompt_text: str, prompt_wav: Any,
                               resample_rate: int, zero_shot_spk_id: str) -> dict[str, Any]:
            if zero_shot_spk_id != "":
                return original(tts_text, prompt_text, prompt_wav, resample_rate,
                                zero_shot_spk_id)
            prompt = self.prompt(original, prompt_text, prompt_wav, resample_rate)
            model_input = _to_frontend(prompt.artifact.tensors, frontend)
            model_input["text"], model_input["text_len"] = frontend._extract_text_token(tts_text)
            return model_input

        frontend.frontend_zero_shot = frontend_zero_shot
        return frontend

    def prompt(self, extract: Any, prompt_text: str, prompt_wav: Any,
               resample_rate: int) -> StageResult:
        """The prompt features of one clip and transcript (extracted at most once)."""
        clip = clip_of(prompt_wav)
        inputs = StageInputs("prompt", EXTRACTOR, self.revision, clip.fingerprint, self.tenant,
                             prompt_text, params={"resample_rate": int(resample_rate)})

        def compute() -> dict[str, Any]:
            with self._lock:
                self.extractions += 1
            features = extract("", prompt_text, prompt_wav, resample_rate, "")
            return {name: value for name, value in features.items() if name not in PER_SENTENCE}

        return self.stages.get_or_compute(inputs, compute)


def _to_frontend(arrays: Any, frontend: Any) -> dict[str, Any]:
    """Stored arrays back as the torch tensors the model expects, on its device."""
    import torch

    device = getattr(frontend, "device", "cpu")
    return {name: torch.from_numpy(array.copy()).to(device) for name, array in arrays.items()}
