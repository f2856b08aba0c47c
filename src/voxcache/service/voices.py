"""Uploaded voices: a reference clip and its prompt text, stored once per tenant.

A voice id is derived from what the clip *sounds like* (the decoded-PCM
fingerprint) and its prompt text, so the same clip uploaded twice — re-encoded,
renamed — is one voice, and two tenants uploading one clip get the same id in
separate folders (``<cache>/voices/<tenant>/<id>/``): an id is useless outside
its tenant. In privacy mode the raw clip is never written: the voice keeps its
fingerprint and metadata, so takes already rendered with it stay servable, but
new sentences need the clip uploaded again.

What the service derives from a voice (its speaker embedding, ``voice_artifacts``)
lives in the cache, keyed by the clip's content; ``voice.json`` records the
embedding's key so a lookup needs no clip, which a private voice does not have.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import blake3

from ..audio import decode_reference, fingerprint_reference
from ..errors import BadReferenceAudio, InvalidParameter, NotFound
from ..fsmode import private_dirs, write_private
from ..request import normalize_text

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

    def public(self) -> dict[str, object]:
        """What the API shows (the tenant is implied by the caller)."""
        data = asdict(self)
        data.pop("tenant")
        data["fingerprint"] = self.fingerprint[:16]
        return data


class VoiceStore:
    """Voices under ``<root>/<tenant>/<id>/``: ``voice.json`` and, unless private, ``clip``."""

    def __init__(self, root: Path, max_seconds: float) -> None:
        self.root = Path(root)
        self.max_seconds = max_seconds

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
        voice = self._read(tenant, voice_id)
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
        """Remove a voice (its clip and metadata); ``NotFound`` when the tenant has none."""
        self.get(tenant, voice_id)
        shutil.rmtree(self._folder(tenant, voice_id), ignore_errors=True)

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
