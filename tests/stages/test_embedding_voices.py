"""A clip's speaker embedding feeds an engine whose voices are embeddings.

An uploaded clip voice, named on an engine that takes tensor voices of a speaker
embedding's shape (256 float32) and clones no clips, is rendered with the clip's embedding
from the stage cache: keyed by the embedding's content, so the same clip uploaded again is
the same take and another speaker's clip is another.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

pytest.importorskip("resemblyzer")


def test_a_clip_voice_reaches_an_embedding_engine_as_its_embedding(
        tmp_path: Path, piper_clips, encoder) -> None:
    settings = Settings(cache_dir=tmp_path / "cache", engine="styletone")
    with TestClient(create_app(settings, options=ServiceOptions())) as client:
        ids = []
        for clip in (piper_clips[0], piper_clips[1]):
            made = client.post("/v1/voices", files={"file": ("c.wav", clip)},
                               data={"prompt_text": "A sentence."})
            assert made.status_code in (200, 201), made.text
            assert made.json()["embedding_status"]["status"] == "ready", made.json()
            ids.append(made.json()["id"])
        answers = [client.post("/v1/audio/speech", json={
            "input": "Said in an uploaded voice.", "voice": voice, "seed": 3,
            "response_format": "wav"}) for voice in (ids[0], ids[0], ids[1])]
    assert [a.status_code for a in answers] == [200, 200, 200], answers[0].text
    assert [a.headers["x-cache"] for a in answers[:2]] == ["MISS", "HIT"]
    first, again, other = (a.headers["x-cache-key"] for a in answers)
    assert first == again and other != first  # two clips of one speaker: two embeddings
