"""Uploaded voices: a reference clip and its prompt text, or a tensor, stored once per tenant.

A voice id comes from what the clip sounds like (decoded-PCM fingerprint) and its prompt
text, stored under ``<cache>/voices/<tenant>/<id>/`` (an id is useless outside its tenant);
in privacy mode the clip is never written. A tensor voice is keyed by its dtype, shape and
bytes and also stored as a ``voice`` entry in the tiers, so every worker and node finds it
by id. docs/operating/service.md, "Voices".
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import blake3
import numpy as np

from ..audio import decode_reference, fingerprint_reference
from ..cache import Cache
from ..engine import TensorVoice
from ..errors import BadReferenceAudio, InvalidParameter, NotFound
from ..fsmode import private_dirs, write_private
from ..key import KEY_SCHEMA_VERSION, digest
from ..request import normalize_text
from ..tensors import load_tensors, tensor_entry, tensor_voice

VOICE_ID = re.compile(r"vc_[0-9a-f]{24}")
MAX_PROMPT_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Voice:
    """An uploaded voice as stored (never the clip itself)."""

    id: str
    tenant: str
    name: str
    prompt_text: str | None
    fingerprint: str
    duration: float
    sample_rate: int
    created: float
    private: bool
    """True when the raw clip was not kept (privacy mode)."""
    embedding: str | None = None
    """The stage-cache key of the voice's speaker embedding (None: not derived yet)."""
    kind: str = "clip"
    """``clip`` (a reference clip) or ``tensor`` (an array the engine takes as the voice)."""
    shape: list[int] | None = None
    dtype: str | None = None

    def public(self) -> dict[str, object]:
        """What the API shows (the tenant is implied by the caller)."""
        data = asdict(self)
        data.pop("tenant")
        data["fingerprint"] = self.fingerprint[:16]
        return data


TENSOR_FILE = "tensor.safetensors"


def voice_key(tenant: str, voice_id: str) -> str:
    """Where a tensor voice is kept in the cache's tiers (a tenant's id names only its own)."""
    return digest({"schema": KEY_SCHEMA_VERSION, "kind": "voice", "tenant": tenant,
                   "id": voice_id})


def is_safetensors(data: bytes) -> bool:
    """Whether ``data`` starts like a safetensors file (a header length, then JSON)."""
    if len(data) < 10 or data[8:9] != b"{":
        return False
    return int.from_bytes(data[:8], "little") <= len(data) - 8


class VoiceStore:
    """Voices under ``<root>/<tenant>/<id>/``: ``voice.json`` and, unless private, ``clip``
    (or ``tensor.safetensors``); tensor voices also in ``cache``'s tiers."""

    def __init__(self, root: Path, max_seconds: float, cache: Cache | None = None) -> None:
        self.root = Path(root)
        self.max_seconds = max_seconds
        self.cache = cache

    def add_tensor(self, tenant: str, data: bytes, spec: TensorVoice,
                   name: str | None) -> tuple[Voice, bool]:
        """Validate and store a tensor voice (a safetensors file holding one tensor of the
        engine's shape); return the voice and whether it was new."""
        from safetensors import SafetensorError
        from safetensors.numpy import load

        try:
            arrays = load(data)
        except (SafetensorError, ValueError, OverflowError) as exc:
            raise InvalidParameter(f"the file is not a readable safetensors file: {exc}") from None
        if len(arrays) != 1:
            raise InvalidParameter(f"a tensor voice is a safetensors file holding one tensor; "
                                   f"this one holds {len(arrays)}")
        try:
            array, fingerprint = tensor_voice(next(iter(arrays.values())), spec.shape,
                                              spec.dtype)
        except ValueError as exc:
            raise InvalidParameter(f"tensor voice: {exc}") from None
        voice_id = "vc_" + blake3.blake3(b"tensor\0" + fingerprint.encode()).hexdigest()[:24]
        existing = self._read(tenant, voice_id)
        if existing is not None:
            return existing, False
        voice = Voice(voice_id, tenant, (name or voice_id)[:100], None, fingerprint, 0.0, 0,
                      time.time(), False, kind="tensor", shape=list(spec.shape),
                      dtype=spec.dtype)
        self._keep(voice, array)
        if self.cache is not None:  # every worker and node finds it by id
            entry = tensor_entry(voice_key(tenant, voice_id), "voice", {"voice": array},
                                 meta={"tenant": tenant, "voice": json.dumps(asdict(voice)),
                                       "text": voice.name})
            self.cache.put(entry, tenant=tenant, pinned=True)
        return voice, True

    def tensor(self, tenant: str, voice_id: str) -> np.ndarray | None:
        """A tensor voice's array (None: not a tensor voice of this tenant's)."""
        voice = self._read(tenant, voice_id)
        if voice is None or voice.kind != "tensor":
            return None
        try:
            data = (self._folder(tenant, voice_id) / TENSOR_FILE).read_bytes()
        except FileNotFoundError:
            return None
        from safetensors.numpy import load

        return load(data)["voice"]

    def _keep(self, voice: Voice, array: np.ndarray) -> None:
        from safetensors.numpy import save

        folder = self._folder(voice.tenant, voice.id)
        private_dirs(folder)
        write_private(folder / TENSOR_FILE, save({"voice": array}))
        write_private(folder / "voice.json", json.dumps(asdict(voice)).encode())

    def _shared(self, tenant: str, voice_id: str) -> Voice | None:
        """A tensor voice another worker or node stored, fetched from the cache's tiers and
        kept here (None: the tiers hold none of this tenant's under that id)."""
        if self.cache is None or not VOICE_ID.fullmatch(voice_id):
            return None
        found = self.cache.get(voice_key(tenant, voice_id), "voice")
        if found is None:
            return None
        meta = found[0].header.meta
        if meta.get("tenant") != tenant:
            return None
        try:
            voice = Voice(**json.loads(meta["voice"]))
            array = load_tensors(found[0])["voice"]
        except (KeyError, ValueError, TypeError):
            return None
        if voice.tenant != tenant or voice.id != voice_id or voice.kind != "tensor":
            return None
        self._keep(voice, array)
        return voice

    def add(self, tenant: str, clip: bytes, prompt_text: str | None, name: str | None,
            private: bool) -> tuple[Voice, bool]:
        """Validate and store a clip; return the voice and whether it was new."""
        decode_reference(clip, self.max_seconds)  # refuses empty, undecodable, too long
        ref = fingerprint_reference(clip, self.max_seconds)
        if ref.duration < 0.1:
            raise BadReferenceAudio(f"reference clip is {ref.duration:.2f} s; send at least 0.1 s")
        prompt = normalize_text(prompt_text) if prompt_text else None
        if prompt and len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidParameter(f"prompt_text is over {MAX_PROMPT_CHARS} characters")
        identity = f"{ref.fingerprint}\0{prompt or ''}".encode()
        voice_id = "vc_" + blake3.blake3(identity).hexdigest()[:24]
        folder = self._folder(tenant, voice_id)
        existing = self._read(tenant, voice_id)
        if existing is not None and (private or not existing.private):
            return existing, False
        voice = Voice(voice_id, tenant, (name or voice_id)[:100], prompt, ref.fingerprint,
                      round(ref.duration, 3), ref.sample_rate, time.time(), private)
        private_dirs(folder)
        if not private:
            write_private(folder / "clip", clip)
        write_private(folder / "voice.json", json.dumps(asdict(voice)).encode())
        return voice, existing is None

    def set_embedding(self, tenant: str, voice_id: str, key: str | None) -> Voice | None:
        """Record the key of the voice's speaker embedding; None when the voice is gone (a
        delete that landed meanwhile is not undone: the folder is not created again)."""
        voice = self._read(tenant, voice_id)
        if voice is None or voice.embedding == key:
            return voice
        updated = replace(voice, embedding=key)
        try:
            write_private(self._folder(tenant, voice_id) / "voice.json",
                          json.dumps(asdict(updated)).encode())
        except FileNotFoundError:
            return None
        return updated

    def find(self, voice_id: str) -> list[Voice]:
        """The voices with this id in every tenant (what an operator's purge names; the
        same clip uploaded by two tenants is one id in two folders)."""
        if not VOICE_ID.fullmatch(voice_id) or not self.root.is_dir():
            return []
        found = []
        for folder in self.root.iterdir():
            voice = self._read_file(folder / voice_id / "voice.json")
            if voice is not None and self._tenant_folder(voice.tenant) == folder:
                found.append(voice)
        return sorted(found, key=lambda v: v.tenant)

    def get(self, tenant: str, voice_id: str) -> Voice:
        """Return the tenant's voice or ``NotFound`` (also for another tenant's id)."""
        voice = self._read(tenant, voice_id) or self._shared(tenant, voice_id)
        if voice is None:
            raise NotFound(f"no voice {voice_id!r}")
        return voice

    def clip(self, tenant: str, voice_id: str) -> bytes | None:
        """The stored clip, or None for a private voice."""
        try:
            return (self._folder(tenant, voice_id) / "clip").read_bytes()
        except FileNotFoundError:
            return None

    def list(self, tenant: str) -> list[Voice]:
        """The tenant's voices, newest first."""
        folder = self._tenant_folder(tenant)
        if not folder.is_dir():
            return []
        voices = [v for p in folder.iterdir() if (v := self._read(tenant, p.name)) is not None]
        return sorted(voices, key=lambda v: v.created, reverse=True)

    def delete(self, tenant: str, voice_id: str) -> None:
        """Remove a voice (its clip or tensor and metadata, and a tensor voice from the
        tiers); ``NotFound`` when the tenant has none."""
        voice = self.get(tenant, voice_id)
        shutil.rmtree(self._folder(tenant, voice_id), ignore_errors=True)
        if voice.kind == "tensor" and self.cache is not None:
            self.cache.delete(voice_key(tenant, voice_id), "voice")

    def _read(self, tenant: str, voice_id: str) -> Voice | None:
        if not VOICE_ID.fullmatch(voice_id):
            return None
        return self._read_file(self._folder(tenant, voice_id) / "voice.json")

    @staticmethod
    def _read_file(path: Path) -> Voice | None:
        try:
            return Voice(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _tenant_folder(self, tenant: str) -> Path:
        return self.root / blake3.blake3(tenant.encode()).hexdigest()[:16]

    def _folder(self, tenant: str, voice_id: str) -> Path:
        if not VOICE_ID.fullmatch(voice_id):
            raise NotFound(f"no voice {voice_id!r}")
        return self._tenant_folder(tenant) / voice_id
