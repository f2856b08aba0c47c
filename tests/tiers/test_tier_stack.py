"""The tier stack: read order, promotion, write-through, and the fail-open rule."""

from __future__ import annotations

import logging
import threading

from voxcache.testing.tier_contract import make_audio_entry
from voxcache.tiers.base import BREAKER_FAILURES, TierStack
from voxcache.tiers.disk import DiskTier
from voxcache.tiers.faults import FaultLog
from voxcache.tiers.memory import MemoryTier


class Broken(MemoryTier):
    """A memory tier that fails every call while ``broken`` is set (a tier gone down)."""

    name = "broken"
    durable = True

    def __init__(self) -> None:
        super().__init__()
        self.broken = False
        self.calls = 0

    def get(self, key, kind="audio"):
        self.calls += 1
        if self.broken:
            raise ConnectionError("tier is down")
        return super().get(key, kind)

    def put(self, entry, **kwargs):
        self.calls += 1
        if self.broken:
            raise ConnectionError("tier is down")
        return super().put(entry, **kwargs)


def stack_of(*tiers, clock=None):
    counts: dict[str, int] = {}
    faults = FaultLog(logging.getLogger("test"), lambda name, n: counts.__setitem__(
        name, counts.get(name, 0) + n))
    kwargs = {"clock": clock} if clock else {}
    return TierStack(list(tiers), faults, **kwargs), counts


def test_a_lower_hit_is_promoted(tmp_path):
    memory, disk = MemoryTier(), DiskTier(tmp_path / "c")
    stack, _ = stack_of(memory, disk)
    entry = make_audio_entry(1)
    disk.put(entry)
    assert stack.get(entry.header.key)[1] == "disk"
    assert stack.get(entry.header.key)[1] == "memory"
    disk.close()


def test_a_read_that_raced_a_delete_is_not_promoted(tmp_path):
    memory, disk = MemoryTier(), DiskTier(tmp_path / "c")
    stack, _ = stack_of(memory, disk)
    entry = make_audio_entry(2)
    disk.put(entry)
    real_get = disk.get

    def get_then_deleted(key, kind="audio"):
        found = real_get(key, kind)
        stack.forget(key)  # another process's delete arrives while this read runs
        return found

    disk.get = get_then_deleted  # type: ignore[method-assign]
    stack.get(entry.header.key)
    assert not memory.contains(entry.header.key)
    disk.close()


def test_a_failing_tier_is_a_miss_then_left_alone_then_used_again():
    now = [0.0]
    broken, memory = Broken(), MemoryTier()
    stack, counts = stack_of(memory, broken, clock=lambda: now[0])
    entry = make_audio_entry(3)
    assert stack.put(entry) is not None
    memory.clear()
    broken.broken = True
    for _ in range(BREAKER_FAILURES):
        assert stack.get(entry.header.key) is None  # fail open: a miss, not an error
    assert counts["tier_broken_errors"] == BREAKER_FAILURES
    calls = broken.calls
    assert stack.get(entry.header.key) is None
    assert broken.calls == calls  # breaker open: not even tried
    assert stack.health()["broken"].state == "down"
    broken.broken = False
    now[0] += 60  # past the back-off: the next call is the probe
    assert stack.get(entry.header.key)[1] == "broken"
    assert stack.health()["broken"].state == "ok"


def test_calls_failing_together_double_the_back_off_once():
    """Under load, many calls are in flight when a tier goes down: they all fail within a
    moment. The back-off doubles once per time the breaker opens, not once per call that
    failed, or a few seconds of outage under load left the tier unused for 30 s after it
    answered again (seen: 14.6 s after Redis and S3 restarted)."""
    now = [0.0]
    broken, memory = Broken(), MemoryTier()
    stack, _ = stack_of(memory, broken, clock=lambda: now[0])
    broken.broken = True
    for n in range(BREAKER_FAILURES):  # opens the breaker for the first back-off (1 s)
        stack.get(make_audio_entry(10 + n).header.key)
    assert stack.health()["broken"].detail.endswith("retried in 1.0 s")
    now[0] += 1.0  # the back-off is over: six callers try the tier at once, and all fail
    in_flight = threading.Barrier(6)
    real_get = Broken.get

    def get_together(key, kind="audio"):
        in_flight.wait(timeout=10)  # every caller is past the breaker before any fails
        return real_get(broken, key, kind)

    broken.get = get_together  # type: ignore[method-assign]
    callers = [threading.Thread(target=stack.get, args=(make_audio_entry(20 + n).header.key,))
               for n in range(6)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=10)
    assert broken.calls == BREAKER_FAILURES + 6
    assert stack.health()["broken"].detail.endswith("retried in 2.0 s")
    broken.broken = False
    now[0] += 2.0  # the doubled back-off only: the tier is used again
    broken.get = lambda key, kind="audio": real_get(broken, key, kind)  # type: ignore[method-assign]
    stack.get(make_audio_entry(30).header.key)
    assert stack.health()["broken"].state == "ok"


def test_stored_means_a_durable_tier_holds_it():
    broken, memory = Broken(), MemoryTier()
    stack, _ = stack_of(memory, broken)
    broken.broken = True
    assert stack.put(make_audio_entry(4)) is None  # only memory has it
    broken.broken = False
    assert stack.put(make_audio_entry(5)) is not None
