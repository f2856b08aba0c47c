"""Tier kinds as data: a plugin tier through the ``voxcache.tiers`` entry-point group, a
``Cache`` made from the tier list alone, and no module outside ``tiers/`` naming a tier.

The plugin (``ledger``) is written to a temporary site folder as its own distribution, so
it comes in through the same door a third-party package would: an entry point.
"""

from __future__ import annotations

import ast
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from voxcache.cache import Cache, CacheConfig
from voxcache.errors import InvalidParameter, PluginLoadError
from voxcache.testing.tier_contract import TierContract, make_audio_entry
from voxcache.tiers.base import Tier
from voxcache.tiers.factory import tier_from_url, tiers_from_urls
from voxcache.tiers.roles import TierRole, role_of

SRC = Path(__file__).resolve().parents[2] / "src" / "voxcache"
LEDGER = '''
from voxcache.tiers.memory import MemoryTier

SHELVES = {}


class Ledger(MemoryTier):
    """A store shared by every cache of this process that names the same URL."""

    name = "ledger"
    durable = True

    def close(self):
        pass


def make(spelling, **options):
    return SHELVES.setdefault(spelling, Ledger(**options))
'''


def install(site: Path, name: str, entry: str, module: str, source: str) -> None:
    """A distribution in ``site`` registering ``entry`` in the ``voxcache.tiers`` group."""
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[voxcache.tiers]\n{entry}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    site = tmp_path / "site"
    install(site, "voxcache-ledger", "ledger = voxcache_ledger:make", "voxcache_ledger", LEDGER)
    install(site, "broken-tier", "broken = broken_tier:make", "broken_tier",
            "import a_module_that_is_not_installed\n")
    install(site, "greedy-tier", "redis = voxcache_ledger:make", "greedy_tier", "")
    monkeypatch.syspath_prepend(str(site))
    yield f"ledger://{uuid.uuid4().hex}"


def test_a_plugin_tier_serves_a_take_another_cache_folder_stored(tmp_path: Path,
                                                                  ledger: str) -> None:
    tiers = ("memory", "disk", ledger)
    first = Cache(tmp_path / "a", CacheConfig(tiers=tiers))
    second = Cache(tmp_path / "b", CacheConfig(tiers=tiers))
    try:
        assert [t.name for t in first.tiers.tiers] == ["memory", "disk", "ledger"]
        assert role_of(first.tiers.tiers[2]) is TierRole.SHARED
        entry = make_audio_entry(7)
        assert first.put(entry, wait=5.0) is not None
        found = second.get(entry.header.key)
        assert found is not None and found[1] == "ledger" and found[0].blob == entry.blob
    finally:
        first.close()
        second.close()


def test_a_broken_or_unknown_plugin_is_a_clear_error(ledger: str) -> None:
    with pytest.raises(PluginLoadError, match=r"tier plugin 'broken' \(broken_tier:make from "
                       r"broken-tier 0.1\) could not be imported: ModuleNotFoundError"):
        tier_from_url("broken://x")
    with pytest.raises(InvalidParameter, match=r"s3://bucket/prefix, broken://…, ledger://…"):
        tier_from_url("nosuch://x")
    # a plugin cannot take over a shipped scheme: redis:// is still the Redis tier
    assert type(tier_from_url("redis://127.0.0.1:1/0")).__name__ == "RedisTier"


class TestLedgerPlugin(TierContract):
    """The tier a plugin's entry point makes keeps the contract every tier keeps."""

    @pytest.fixture
    def tier(self, ledger: str) -> Iterator[Tier]:
        made = tier_from_url(ledger)
        yield made
        made.close()


def test_a_list_that_cannot_be_built_closes_what_it_built(tmp_path: Path) -> None:
    """The disk tier made before a Redis spelling is refused ends its session (its record
    goes, so the next start need not walk the folder)."""
    root = tmp_path / "cache"
    with pytest.raises(InvalidParameter, match="database number"):
        tiers_from_urls(["disk", "redis://h:6379/zero"], options={"disk": {"root": root}})
    assert sorted(p.name for p in (root / "sessions").iterdir()) == ["walked"]


def test_the_cache_asks_for_tiers_by_role(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    try:
        assert [role_of(t) for t in cache.tiers.tiers] == [TierRole.PROCESS, TierRole.FOLDER]
        assert cache.folder is cache.tiers.tiers[1] and cache.in_process is cache.tiers.tiers[0]
        entry = make_audio_entry(3)
        cache.put(entry)
        assert cache.recall(entry.header.key) == (entry, "memory")
    finally:
        cache.close()


def _reaches(path: Path) -> list[str]:
    """``<something>.cache.disk`` / ``.memory`` (a named tier reached through a cache), and
    names of tier classes, in one module."""
    found: list[str] = []
    text = path.read_text()
    if not any(word in text for word in (".disk", ".memory", "Tier")):
        return found  # nothing to parse for
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in ("disk", "memory"):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "cache":
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno} .{node.attr}")
        if isinstance(node, ast.Name) and node.id in ("DiskTier", "MemoryTier", "RedisTier",
                                                       "S3Tier"):
            found.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {node.id}")
    return found


def test_no_module_outside_tiers_reaches_a_named_tier() -> None:
    """Outside ``tiers/`` the code asks the cache (``folder``, ``in_process``, ``recall``,
    ``index``), never a tier by its kind."""
    modules = [p for p in SRC.rglob("*.py") if "tiers" not in p.relative_to(SRC).parts]
    assert len(modules) > 100
    assert [hit for path in modules for hit in _reaches(path)] == []
