"""A take published after the leader stopped waiting is adopted whatever the leader was doing.

The fault (the three-node convergence test failed so once in eight loaded runs): a leader's
wait for the shared tiers ran out, the publication finished while the leader was between
writing its own take to this folder and to memory, the publisher adopted the winner in
both, and the leader's memory write then put its own take back: the node served its own
take after publication, the others the winner.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path

from voxcache.entry import Entry
from voxcache.testing.tier_contract import make_audio_entry
from voxcache.tiers.base import TierStack
from voxcache.tiers.disk import DiskTier
from voxcache.tiers.faults import FaultLog
from voxcache.tiers.memory import MemoryTier
from voxcache.tiers.publish import Publisher

WAIT = 0.05
"""The leader's wait for the shared tiers: far shorter than the held publication."""


class HeldShared(MemoryTier):
    """A shared tier already holding another node's take; each write waits for ``go``."""

    name = "shared"
    durable = True

    def __init__(self, held: Entry) -> None:
        super().__init__()
        super().put(held)
        self.go = threading.Event()

    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None:
        assert self.go.wait(10), "the test never let the publication through"
        return super().put(entry, tenant=tenant, pinned=pinned, pin_until=pin_until)


class InterruptedMemory(MemoryTier):
    """Memory whose first write of ``ours`` lets the publication finish first (the window
    between the leader's folder write and its memory write)."""

    def __init__(self, ours: Entry, shared: HeldShared, publisher: Publisher) -> None:
        super().__init__()
        self.ours, self.shared, self.publisher = ours, shared, publisher
        self.interrupted = False

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        if entry.blob == self.ours.blob and not self.interrupted:
            self.interrupted = True
            self.shared.go.set()
            assert self.publisher.wait_for(entry.header.key, 10)
        return super().replace(entry, tenant=tenant)


def test_a_publication_decided_during_the_leaders_own_writes_still_wins(tmp_path: Path) -> None:
    winner, ours = make_audio_entry(5, take=1), make_audio_entry(5, take=2)
    key = ours.header.key
    shared = HeldShared(winner)
    counts: Counter[str] = Counter()
    publisher = Publisher([shared], count=lambda name, n: counts.update({name: n}))
    memory = InterruptedMemory(ours, shared, publisher)
    disk = DiskTier(tmp_path / "c")
    faults = FaultLog(logging.getLogger("test"), lambda name, n: None)
    stack = TierStack([memory, disk, shared], faults, publisher=publisher)
    try:
        stack.put(ours, wait=WAIT)
        assert memory.interrupted, "the publication was not let through mid-write"
        assert publisher.wait_for(key, 10)
        held = {name: tier.get(key) for name, tier in (("memory", memory), ("disk", disk))}
        assert {name: entry is not None and entry.blob == winner.blob
                for name, entry in held.items()} == {"memory": True, "disk": True}
        assert stack.get(key)[0].blob == winner.blob
        assert counts["takes_adopted"] == 1
    finally:
        publisher.close()
        disk.close()
