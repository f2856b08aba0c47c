"""Content-addressed keys: BLAKE3-256 over a canonical encoding of a resolved request.

The encoding is sorted, compact JSON — never ``hash()``, ``repr`` or pickle, whose
output varies across processes and versions. Floats are already canonical
(resolution folds ``1`` and ``1.0``); JSON writes them with Python's shortest
round-trip repr, which is stable. ``KEY_SCHEMA_VERSION`` is inside the hashed
bytes: changing what a key covers means bumping it, so old keys simply stop
matching instead of matching the wrong audio.
"""

from __future__ import annotations

import json
from typing import Any

import blake3

from .resolved import ResolvedRequest

KEY_SCHEMA_VERSION = 1


def key_payload(
    request: ResolvedRequest,
    waveform_param_names: frozenset[str] | None = None,
    kind: str = "audio",
) -> dict[str, Any]:
    """Return the dictionary that is hashed into the key (what `explain` shows)."""
    params = dict(request.params)
    if waveform_param_names is not None:
        params = {k: v for k, v in params.items() if k in waveform_param_names}
    return {
        "schema": KEY_SCHEMA_VERSION,
        "kind": kind,
        "tenant": request.tenant,
        "engine": request.engine_id,
        "model": request.model_revision,
        "text": request.text,
        "voice": request.voice,
        "reference": request.reference_fingerprint,
        "prompt_text": request.prompt_text,
        "language": request.language,
        "instruct": request.instruct,
        "seed": request.seed,
        "speed": request.speed,
        "params": params,
    }


def canonical_bytes(payload: dict[str, Any]) -> bytes:
    """Encode a payload canonically: sorted keys, no spaces, UTF-8."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(payload: dict[str, Any]) -> str:
    """Return the 64-hex-digit BLAKE3-256 of the payload's canonical bytes."""
    return blake3.blake3(canonical_bytes(payload)).hexdigest()


def derived_key(parent: str, kind: str, **fields: Any) -> str:
    """Key an artifact derived from another entry (e.g. an encoded variant)."""
    return digest({"schema": KEY_SCHEMA_VERSION, "kind": kind, "parent": parent, **fields})

