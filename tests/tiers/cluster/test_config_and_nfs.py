"""The tier list in the config file and the environment, and the shared-folder (NFS) stance.

``tiers = [...]`` (TOML) and ``VOXCACHE_TIERS`` give the stack; a list that does not
start with the cache folder's own tiers, or names a tier voxcache does not know, is
refused at start with what to write instead. A cache folder on NFS/SMB is refused
(SQLite and ``flock`` are not safe there) with a message that says what to use: a local
folder on each node and the shared tiers. Detection reads the mount table; a table of
the test's own stands in for a real NFS mount.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from voxcache.cache import Cache, CacheConfig
from voxcache.config import load_settings
from voxcache.errors import CacheDirError, InvalidParameter
from voxcache.testing import forked
from voxcache.testing.servers import clean_env
from voxcache.tiers import disk as disk_module


def test_the_tier_list_comes_from_the_file_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "voxcache.toml"
    config.write_text('tiers = ["memory", "disk", "redis://10.0.0.5:6379/0", '
                      '"s3://voice-cache/prod"]\nshared_write_queue = "16MB"\n')
    for name in list(os.environ):
        if name.startswith("VOXCACHE_"):
            monkeypatch.delenv(name)
    settings = load_settings(config)
    assert settings.tiers == ("memory", "disk", "redis://10.0.0.5:6379/0",
                              "s3://voice-cache/prod")
    assert settings.cache_config().tiers == settings.tiers
    assert settings.cache_config().shared_write_queue == 16_000_000
    monkeypatch.setenv("VOXCACHE_TIERS", "memory,disk,redis+cluster://10.0.0.7:7000")
    assert load_settings(config).tiers == ("memory", "disk", "redis+cluster://10.0.0.7:7000")
    monkeypatch.delenv("VOXCACHE_TIERS")
    assert load_settings().tiers == ("memory", "disk")  # the default: one machine


@pytest.mark.parametrize(("given", "says"), [
    ("disk,memory,redis://h:1/0", 'start with "memory", "disk"'),
    ("memory,disk,disk", "may appear only once"),
    ("memory,disk,memcached://h:11211", "is not one voxcache knows"),
    ("memory,disk,redis://:secret@h:1/0,redis://h:2/0", "more than once"),
])
def test_a_tier_list_voxcache_cannot_use_is_refused_with_what_to_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, says: str) -> None:
    monkeypatch.setenv("VOXCACHE_TIERS", given)
    with pytest.raises(InvalidParameter, match=says) as refused:
        Cache(tmp_path / "cache", load_settings().cache_config())
    assert "secret" not in str(refused.value)


def _mounts(tmp_path: Path, fstype: str, where: Path) -> Path:
    table = tmp_path / "mounts"
    table.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/export {where} {fstype} rw 0 0\n")
    return table


@pytest.mark.parametrize("fstype", ["nfs", "nfs4", "cifs"])
def test_a_cache_folder_on_a_network_filesystem_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fstype: str) -> None:
    shared = tmp_path / "shared"
    monkeypatch.setattr(disk_module, "MOUNTS", str(_mounts(tmp_path, fstype, shared)))
    with pytest.raises(CacheDirError) as refused:
        Cache(shared / "voxcache", CacheConfig())
    message = str(refused.value)
    assert f"network filesystem ({fstype})" in message
    assert "local cache_dir" in message and "redis://" in message and "s3://" in message
    assert not (shared / "voxcache").exists()  # nothing was made, let alone opened, there


def test_a_local_filesystem_in_the_same_table_is_accepted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_module, "MOUNTS", str(_mounts(tmp_path, "ext4", tmp_path / "x")))
    Cache(tmp_path / "local", CacheConfig()).close()


REFUSE = """
import sys
import voxcache.tiers.disk
voxcache.tiers.disk.MOUNTS = sys.argv[1]
from voxcache.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_serve_on_an_nfs_cache_folder_stops_with_the_message(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    table = _mounts(tmp_path, "nfs4", shared)
    done = forked.run(
        [sys.executable, "-c", REFUSE, str(table), "--cache-dir", str(shared / "vx"),
         "--engine", "tone", "serve", "--port", "1"],
        capture_output=True, text=True, timeout=60,
        env=clean_env())
    assert done.returncode != 0
    assert "network filesystem (nfs4)" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
