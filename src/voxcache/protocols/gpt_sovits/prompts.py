"""GPT-SoVITS ``TTS.prompt_cache``, persistent, shared and keyed by content
(docs/internals/stages.md).

``TTS.run`` keeps one prompt, recomputed only when ``ref_audio_path`` differs *as a string*: a
restart loses it (GPT-SoVITS#2141) and a new clip at the same path keeps the old voice.
``GPTSoVITSPrompts.install(tts)`` wraps ``run`` so each call's prompt comes from the stage cache,
keyed by the clip's decoded PCM (extracted once with the engine's own methods). The raw clip samples
(``raw_audio``) are never stored, nor v2Pro's ``refer_spec`` (it holds the clip at 16 kHz): privacy
mode keeps derived artifacts only. Auxiliary references are left to ``run``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...stages.cache import Artifact, StageCache, StageResult
from ...stages.clip import Clip
from ...stages.engine_clips import clip_of
from ...stages.keys import DEFAULT_TENANT, StageInputs

EXTRACTOR = "gpt-sovits.prompt_cache"
SENTENCE_ENDS = frozenset("，。？！,.?!~:：—…")
"""GPT-SoVITS's ``splits``: a prompt text not ending in one gets a full stop appended."""


def normalized_prompt_text(prompt_text: str, prompt_lang: str) -> str:
    """The prompt text as ``TTS.run`` compares and stores it."""
    text = prompt_text.strip("\n")
    if text and text[-1] not in SENTENCE_ENDS:
        text += "。" if prompt_lang != "en" else "."
    return text


class GPTSoVITSPrompts:
    """``TTS.prompt_cache`` filled from a ``StageCache`` before every ``run``."""

    def __init__(self, stages: StageCache, revision: str, tenant: str = DEFAULT_TENANT) -> None:
        self.stages = stages
        self.revision = revision
        """The weights in use (GPT and SoVITS checkpoints' hashes, the version)."""
        self.tenant = tenant
        self.extractions = 0
        """Prompt extractions that really ran (what a test counts)."""
        self._run_lock = threading.Lock()
        """``run`` mutates ``prompt_cache``: one call at a time per engine instance."""

    def install(self, tts: Any) -> Any:
        """Wrap ``tts.run`` so every call starts from the cached prompt; return ``tts``."""
        original = tts.run

        def run(inputs: dict) -> Iterator[Any]:
            with self._run_lock:
                reference = inputs.get("ref_audio_path")
                prompt_text = inputs.get("prompt_text") or ""
                if reference and prompt_text:
                    self.load(tts, reference, prompt_text, inputs.get("prompt_lang", ""))
                yield from original(inputs)

        tts.run = run
        return tts

    def load(self, tts: Any, ref_audio_path: str, prompt_text: str,
             prompt_lang: str) -> StageResult:
        """Put the prompt of the clip now at ``ref_audio_path`` into ``tts.prompt_cache``."""
        clip = clip_of(ref_audio_path)
        text = normalized_prompt_text(prompt_text, prompt_lang)
        configs = tts.configs
        inputs = StageInputs(
            "prompt", EXTRACTOR, self.revision, clip.fingerprint, self.tenant, text, prompt_lang,
            {"version": str(configs.version), "is_half": bool(configs.is_half),
             "sampling_rate": int(configs.sampling_rate), "v2pro": bool(tts.is_v2pro)})
        result = self.stages.get_or_compute(
            inputs, lambda: self._extract(tts, ref_audio_path, text, prompt_lang))
        _install(tts, result, ref_audio_path, text, prompt_lang, clip)
        return result

    def _extract(self, tts: Any, ref_audio_path: str, text: str, prompt_lang: str
                 ) -> dict[str, Any]:
        """The engine's own extraction, as ``run`` would do it."""
        self.extractions += 1
        tts._set_prompt_semantic(ref_audio_path)
        phones, bert_features, norm_text = \
            tts.text_preprocessor.segment_and_extract_feature_for_text(
                text, prompt_lang, tts.configs.version)
        arrays = {"prompt_semantic": tts.prompt_cache["prompt_semantic"],
                  "phones": np.asarray(phones, dtype=np.int64), "bert_features": bert_features}
        if not tts.is_v2pro:  # v2Pro's refer_spec holds the clip itself (16 kHz)
            arrays["refer_spec"] = tts._get_ref_spec(ref_audio_path)[0]
        return Artifact(arrays, {"norm_text": norm_text})


def _install(tts: Any, result: StageResult, path: str, text: str, lang: str,
             clip: Clip) -> None:
    """Fill ``prompt_cache`` so ``run`` sees the prompt as current for this call."""
    import torch

    device = tts.configs.device
    arrays = result.artifact.tensors

    def tensor(name: str) -> torch.Tensor:
        return torch.from_numpy(arrays[name].copy()).to(device)

    if "refer_spec" in arrays:
        refer_spec = (tensor("refer_spec"), None)
    else:  # v2Pro: recomputed from the clip, never stored
        refer_spec = tuple(tts._get_ref_spec(path))
    cache = tts.prompt_cache
    cache["ref_audio_path"] = path
    cache["prompt_semantic"] = tensor("prompt_semantic")
    cache["refer_spec"] = [refer_spec]
    cache["aux_ref_audio_paths"] = []  # run recomputes auxiliary references itself
    cache["prompt_text"] = text
    cache["prompt_lang"] = lang
    cache["phones"] = arrays["phones"].tolist()
    cache["bert_features"] = tensor("bert_features")
    cache["norm_text"] = result.artifact.fields.get("norm_text", "")
    cache["raw_audio"] = torch.from_numpy(np.ascontiguousarray(clip.samples().T)).to(device)
    cache["raw_sr"] = clip.sample_rate
