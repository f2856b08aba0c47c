"""GPT-SoVITS api_v2's ``/tts`` fields, and the content ids that key its reference clips.

Every field is declared under its api_v2 name with api_v2's default (docs/operating/gateway.md,
"GPT-SoVITS"); a reference clip is keyed by its content (``pcm:``/``bytes:`` ids), never by its
path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import blake3

from ...audio import fingerprint_reference
from ...errors import BadReferenceAudio, InvalidParameter
from ...params import ParamSpec
from ...references import DEFAULT_TENANT, ReferenceClip, ReferenceFolders

LANGUAGES = ("auto", "auto_yue", "en", "zh", "ja", "yue", "ko", "all_zh", "all_ja", "all_yue",
             "all_ko")
"""api_v2's text_lang/prompt_lang values for v2 and later (v1 lacks the yue/ko ones)."""
SPLIT_METHODS = ("cut0", "cut1", "cut2", "cut3", "cut4", "cut5")
SEED_LIMIT = 2**32
"""GPT-SoVITS seeds numpy, which takes 0 ≤ seed < 2**32."""


def _spec(name: str, kind: str, default: Any, doc: str, *, shapes: bool = True,
          **limits: Any) -> ParamSpec:
    return ParamSpec(name, kind, default, shapes_waveform=shapes, doc=doc, **limits)


PARAMS: dict[str, ParamSpec] = {s.name: s for s in (
    _spec("ref_audio_path", "str", "", "reference clip, a path on the upstream", shapes=False),
    _spec("ref_audio_id", "str", "", "content id (pcm:… or bytes:…) of ref_audio_path"),
    _spec("aux_ref_audio_paths", "str", "", "JSON list of extra reference paths", shapes=False),
    _spec("aux_ref_audio_ids", "str", "", "sorted ids of aux_ref_audio_paths, comma-separated"),
    _spec("prompt_text", "str", "", "what the reference clip says (empty: ref-free mode)"),
    _spec("prompt_lang", "str", "", "language of prompt_text (empty: same as text_lang)",
          choices=("", *LANGUAGES)),
    _spec("top_k", "int", 15, "top-k sampling", minimum=1, maximum=1000),
    _spec("top_p", "float", 1.0, "top-p sampling", minimum=0.0, maximum=1.0),
    _spec("temperature", "float", 1.0, "sampling temperature", minimum=0.01, maximum=10.0),
    _spec("text_split_method", "str", "cut5", "how text is cut into segments",
          choices=SPLIT_METHODS),
    _spec("batch_size", "int", 1, "T2S batch size (changes numerics)", minimum=1, maximum=200),
    _spec("batch_threshold", "float", 0.75, "batch bucketing threshold", minimum=0.0,
          maximum=1.0),
    _spec("split_bucket", "bool", True, "sort segments into buckets by length"),
    _spec("fragment_interval", "float", 0.3, "seconds of silence between fragments",
          minimum=0.0, maximum=10.0),
    _spec("streaming_mode", "int", 0, "0 whole, 1 fragments, 2/3 streaming decode",
          choices=(0, 1, 2, 3)),
    _spec("parallel_infer", "bool", True, "batched T2S inference"),
    _spec("repetition_penalty", "float", 1.35, "T2S repetition penalty", minimum=0.0,
          maximum=10.0),
    _spec("sample_steps", "int", 32, "CFM steps (v3/v4)", minimum=1, maximum=256),
    _spec("super_sampling", "bool", False, "24→48 kHz super-sampling (v3)"),
    _spec("overlap_length", "int", 2, "semantic-token overlap (streaming modes 2/3)",
          minimum=0, maximum=1000),
    _spec("min_chunk_length", "int", 16, "minimum tokens per chunk (streaming modes 2/3)",
          minimum=1, maximum=10000),
)}

def clip_id(data: bytes) -> str:
    """A reference clip's content id: its decoded samples, else (a format only the upstream
    decodes, or a clip over our length limit) its bytes."""
    try:
        return "pcm:" + fingerprint_reference(data).fingerprint
    except BadReferenceAudio:
        return "bytes:" + blake3.blake3(data).hexdigest()


def reference_params(references: ReferenceFolders, ref_audio_path: str,
                     aux_ref_audio_paths: Sequence[str] = (),
                     tenant: str = DEFAULT_TENANT) -> dict[str, str]:
    """The four reference parameters of a request naming clips by path, read through
    ``references`` for ``tenant`` (a path it may not read is refused, never keyed)."""
    aux = list(aux_ref_audio_paths)
    main = references.read(ref_audio_path, tenant) if ref_audio_path else None
    return clip_params(ref_audio_path, main, aux, [references.read(p, tenant) for p in aux])


def clip_params(path: str, main: ReferenceClip | None, aux: list[str],
            aux_clips: list[ReferenceClip]) -> dict[str, str]:
    return {
        "ref_audio_path": path,
        "ref_audio_id": clip_id(main.data) if main is not None else "",
        "aux_ref_audio_paths": json.dumps(aux) if aux else "",
        "aux_ref_audio_ids": ",".join(sorted({clip_id(c.data) for c in aux_clips})),
    }


def aux_paths(text: str) -> list[str]:
    """Decode the ``aux_ref_audio_paths`` parameter (a JSON list of strings)."""
    if not text:
        return []
    try:
        paths = json.loads(text)
    except ValueError:
        paths = None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise InvalidParameter(
            f"aux_ref_audio_paths must be a JSON list of paths, got {text[:100]!r}")
    return paths

