"""A damaged switch state file (``upstreams/<kind>-<url>.json``) is never trusted.

Whatever the file holds, the gateway serves under a revision no stored take has, so a
request after a damaged record is a miss, never the take of weights that may not be loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from voxcache.cache import Cache
from voxcache.upstream.revision import STATE_FOLDER, UNREADABLE, Switchboard


class Upstream:
    """The two things the switchboard needs of an upstream engine."""

    kind = "gpt-sovits"
    url = "http://127.0.0.1:9880"
    id = "gpt-sovits"
    model_revision = "stand-in"

    def __init__(self) -> None:
        self.in_force: dict[str, Any] = {}

    def put_in_force(self, in_force: Mapping[str, Any]) -> None:
        self.in_force = dict(in_force)


@pytest.mark.parametrize("damage", [
    b"[1, 2, 3]",                                    # JSON, not an object
    b'"in_force"',                                   # a bare string
    b'{"in_force": {"gpt": 7}}',                     # a weight that is not a path
    b'{"in_force": ["gpt", "sovits"]}',              # in force as a list
    b'{"in_force": {"gpt": "a.ckpt"',                # cut short
    b"\xff\xfe\x00garbage",                          # not text
])
def test_a_damaged_record_is_served_under_the_unreadable_revision(
        tmp_path: Path, damage: bytes) -> None:
    cache = Cache(tmp_path / "cache")
    try:
        good = Upstream()
        board = Switchboard(cache, good)
        board.commit({"in_force": {"gpt": "a.ckpt"}})
        assert good.in_force == {"gpt": "a.ckpt"}
        (state,) = (tmp_path / "cache" / STATE_FOLDER).glob("*.json")
        state.write_bytes(damage)
        fresh = Upstream()
        Switchboard(cache, fresh)
        assert fresh.in_force == UNREADABLE
    finally:
        cache.close()
