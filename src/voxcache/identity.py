"""The identity an engine keys takes with, as a document an edge can mirror.

An edge keys a request as its center does only if it resolves it the same way: engine id,
model revision, declared parameters and defaults, voices, aliases, languages and
capability flags. The center serves it (``GET /v1/packs/identity``), every pack manifest
carries it, and a node records it in ``packs/identity.json`` so an edge whose center is
unreachable still keys what it holds. docs/operating/edge.md, "The edge".
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .engine import Engine
from .errors import InvalidParameter
from .fsmode import private_dirs, write_private
from .params import ParamSpec

RECORD = Path("packs") / "identity.json"
TYPES = ("float", "int", "bool", "str")


class BadIdentity(InvalidParameter):
    """An identity document that cannot describe an engine."""


def describe(engine: Engine, voice_aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The identity of ``engine`` (plus the service's ``[voice_aliases]``)."""
    return {
        "id": engine.id,
        "model_revision": engine.model_revision,
        "sample_rate": engine.sample_rate,
        "params": [spec.describe() for spec in engine.params.values()],
        "voices": dict(engine.voices),
        "voice_aliases": dict(voice_aliases or {}),
        "default_voice": engine.default_voice,
        "languages": list(engine.languages),
        "default_language": engine.default_language,
        "supports_reference": engine.supports_reference,
        "supports_instruct": engine.supports_instruct,
        "supports_seed": engine.supports_seed,
        "speech": engine.speech,
    }


def apply(engine: Engine, doc: Mapping[str, Any]) -> None:
    """Give ``engine`` the identity ``doc`` describes (checked field by field first)."""
    checked = check(doc)
    for name, value in checked.items():
        setattr(engine, name, value)


def check(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The engine attributes ``doc`` describes; ``BadIdentity`` names what is wrong."""
    if not isinstance(doc, Mapping):
        raise BadIdentity("an engine identity must be a JSON object")
    out: dict[str, Any] = {}
    for name in ("id", "model_revision", "default_language"):
        out[name] = _text(doc, name)
    rate = doc.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int) or not 0 < rate < 2**31:
        raise BadIdentity("identity 'sample_rate' must be a positive integer")
    out["sample_rate"] = rate
    out["params"] = {spec.name: spec for spec in (_param(p) for p in _items(doc, "params"))}
    voices = _mapping(doc, "voices")
    for alias, target in _mapping(doc, "voice_aliases").items():
        if target in voices:  # a [voice_aliases] name the center accepts works here too
            voices.setdefault(alias, voices[target])
    out["voices"] = voices
    default_voice = doc.get("default_voice")
    if default_voice is not None and default_voice not in voices.values():
        raise BadIdentity("identity 'default_voice' must be one of its voices or null")
    out["default_voice"] = default_voice
    languages = _items(doc, "languages")
    if not languages or not all(isinstance(x, str) and x for x in languages):
        raise BadIdentity("identity 'languages' must be a list of language codes")
    out["languages"] = tuple(languages)
    for flag in ("supports_reference", "supports_instruct", "supports_seed"):
        if not isinstance(doc.get(flag), bool):
            raise BadIdentity(f"identity {flag!r} must be true or false")
        out[flag] = doc[flag]
    # whether the center renders speech (its quality gate's speech checks); a center from
    # before the storing gate does not say: speech, as for any engine
    speech = doc.get("speech", True)
    if not isinstance(speech, bool):
        raise BadIdentity("identity 'speech' must be true or false")
    out["speech"] = speech
    return out


def read_record(root: Path) -> dict[str, Any] | None:
    """The identity recorded in a cache folder (None: none, or unreadable)."""
    try:
        data = json.loads((Path(root) / RECORD).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("identity"), dict) else None


def write_record(root: Path, identity: Mapping[str, Any], source: str,
                 as_of: float | None = None) -> bool:
    """Record ``identity`` (if it differs from the record); True when written."""
    current = read_record(root)
    if current is not None and current["identity"] == dict(identity):
        return False
    path = Path(root) / RECORD
    private_dirs(path.parent)
    record = {"identity": dict(identity), "source": source,
              "as_of": time.time() if as_of is None else as_of}
    write_private(path, json.dumps(record, sort_keys=True, indent=1).encode())
    return True


def _text(doc: Mapping[str, Any], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise BadIdentity(f"identity {name!r} must be a non-empty string")
    return value


def _items(doc: Mapping[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    if not isinstance(value, list):
        raise BadIdentity(f"identity {name!r} must be a list")
    return value


def _mapping(doc: Mapping[str, Any], name: str) -> dict[str, str]:
    value = doc.get(name, {})
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BadIdentity(f"identity {name!r} must map names to names")
    return dict(value)


def _param(raw: Any) -> ParamSpec:
    """A declared parameter from its ``ParamSpec.describe()`` form."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise BadIdentity("each identity parameter must be an object with a name")
    kind = raw.get("type")
    if kind not in TYPES:
        raise BadIdentity(f"parameter {raw['name']!r}: type must be one of {', '.join(TYPES)}")
    choices = raw.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise BadIdentity(f"parameter {raw['name']!r}: choices must be a list or null")
    bounds = [raw.get("minimum"), raw.get("maximum")]
    if not all(b is None or (isinstance(b, int | float) and not isinstance(b, bool))
               for b in bounds):
        raise BadIdentity(f"parameter {raw['name']!r}: minimum/maximum must be numbers")
    if not isinstance(raw.get("shapes_waveform", True), bool):
        raise BadIdentity(f"parameter {raw['name']!r}: shapes_waveform must be true or false")
    # The default is kept exactly as sent (an int stays an int): it is hashed into every key
    # that omits the parameter, so even a center's non-canonical default must be mirrored.
    return ParamSpec(raw["name"], kind, raw.get("default"),
                     shapes_waveform=raw.get("shapes_waveform", True),
                     minimum=bounds[0], maximum=bounds[1],
                     choices=tuple(choices) if choices else None, doc=str(raw.get("doc", "")))
