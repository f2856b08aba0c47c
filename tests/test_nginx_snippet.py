"""docs/operating/nginx.conf serves stored takes straight from the cache folder, at voxcache's
URL."""

from __future__ import annotations

import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.entry import audio_entry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.helpers import servers

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None and not Path("/usr/sbin/nginx")
                                .exists(), reason="nginx is not installed")

KEY = "ab" + "cd" + "1" * 60


def test_nginx_serves_the_stored_take_byte_for_byte(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = Cache(root)
    cache.put(audio_entry(KEY, Audio(b"\x01\x02" * 5000, 22050), meta={"tenant": "default"}))
    stored = cache.folder.path_of(KEY)
    cache.close()
    assert stored == root / "objects" / "ab" / "cd" / f"{KEY}.wav"
    with servers.nginx(root, tmp_path / "nginx") as base:
        with urllib.request.urlopen(f"{base}/v1/audio/{KEY}") as response:
            assert response.status == 200
            assert response.read() == stored.read_bytes()
            assert response.headers["Content-Type"] == "audio/wav"
            assert "immutable" in response.headers["Cache-Control"]
            assert response.headers["ETag"]
        for missing in (f"/v1/audio/{'0' * 64}", f"/v1/audio/{KEY[:-1]}", "/v1/audio/../x"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(base + missing)
            assert err.value.code in (400, 404)
