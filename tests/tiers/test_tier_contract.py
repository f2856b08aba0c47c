"""Memory and disk pass the shipped tier contract (voxcache.testing.tier_contract)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voxcache.entry import Entry
from voxcache.testing.tier_contract import TierContract
from voxcache.tiers.disk import DiskTier
from voxcache.tiers.layout import entry_path
from voxcache.tiers.memory import MemoryTier


class TestMemoryTier(TierContract):
    @pytest.fixture
    def tier(self) -> Iterator[MemoryTier]:
        tier = MemoryTier()
        yield tier
        tier.close()


class TestDiskTier(TierContract):
    @pytest.fixture
    def tier(self, tmp_path: Path) -> Iterator[DiskTier]:
        tier = DiskTier(tmp_path / "cache")
        yield tier
        tier.close()

    def corrupt(self, tier: DiskTier, entry: Entry) -> None:  # type: ignore[override]
        path = entry_path(tier.root, entry.header.key, entry.header.kind)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))

    def plant(self, tier: DiskTier, key: str, kind: str, blob: bytes) -> None:  # type: ignore[override]
        path = entry_path(tier.root, key, kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
