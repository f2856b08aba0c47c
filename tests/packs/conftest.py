"""Fixtures for edge nodes and packs (helpers in ``nodes``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .nodes import cli


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """A signing key and its public half (``voxcache pack keygen``)."""
    key = tmp_path / "keys" / "publisher.key"
    key.parent.mkdir()
    cli("pack", "keygen", "-o", str(key))
    return key, Path(f"{key}.pub")
