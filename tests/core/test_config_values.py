"""Settings that reach every envelope or every wait must be finite and positive."""

from __future__ import annotations

import pytest

from voxcache.config import load_settings
from voxcache.errors import InvalidParameter


@pytest.mark.parametrize("name", ["default_ttl", "lock_wait", "upstream_timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5"])
def test_non_finite_or_non_positive_seconds_are_refused(monkeypatch, name, value) -> None:
    monkeypatch.setenv(f"VOXCACHE_{name.upper()}", value)
    with pytest.raises(InvalidParameter, match=name):
        load_settings()


def test_a_positive_ttl_is_kept(monkeypatch) -> None:
    monkeypatch.setenv("VOXCACHE_DEFAULT_TTL", "3600")
    assert load_settings().default_ttl == 3600.0
