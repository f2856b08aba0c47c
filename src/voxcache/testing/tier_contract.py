"""The contract every tier keeps, as a pytest class to subclass (like dogpile.cache's).

Subclass ``TierContract`` with a ``tier`` fixture. Override ``corrupt`` to let the suite
damage a stored object the way your storage could (a flipped byte in the file, the Redis
value, the S3 object) and ``plant`` to let it write raw bytes where an entry belongs
(garbage, another key's or kind's entry); a tier that cannot be reached from outside
(memory) leaves them raising ``NotImplementedError`` and those tests are skipped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ..audio import Audio
from ..entry import Entry, audio_entry, blob_entry
from ..tiers.base import Tier, TierHealth


def make_audio_entry(i: int, frames: int = 2000, ttl: float | None = None,
                     tenant: str = "default", take: int = 0) -> Entry:
    """A small, distinct audio entry under key ``f"{i:064x}"`` (``take``: another render
    of the same key, with other samples, as an unseeded engine makes)."""
    pcm = ((np.arange(frames) * (i + 1) + take * 7) % 2000 - 1000).astype("<i2").tobytes()
    return audio_entry(f"{i:064x}", Audio(pcm, 16000), ttl=ttl,
                       meta={"tenant": tenant, "text": f"entry {i}"})


def make_blob_entry(i: int, size: int = 3000) -> Entry:
    """A small ``encoded`` entry (a non-audio kind) under key ``f"{i:064x}"``."""
    return blob_entry(f"{i:064x}", "encoded", bytes([i % 256]) * size, "audio/mpeg",
                      meta={"parent": f"{i + 1:064x}"})


class TierContract:
    """What every tier promises; subclasses provide the ``tier`` fixture."""

    @pytest.fixture
    def tier(self) -> Iterator[Tier]:  # pragma: no cover - subclasses override
        raise NotImplementedError("provide a `tier` fixture")

    def corrupt(self, tier: Tier, entry: Entry) -> None:
        """Damage ``entry``'s stored bytes inside ``tier`` (override where possible)."""
        raise NotImplementedError

    def plant(self, tier: Tier, key: str, kind: str, blob: bytes) -> None:
        """Write ``blob`` as is where ``tier`` keeps (key, kind) (override where possible)."""
        raise NotImplementedError

    def _plant(self, tier: Tier, key: str, kind: str, blob: bytes) -> None:
        try:
            self.plant(tier, key, kind, blob)
        except NotImplementedError:
            pytest.skip(f"{type(tier).__name__} cannot be written from outside")

    # -- the protocol ---------------------------------------------------------------
    def test_it_is_a_tier(self, tier: Tier) -> None:
        assert isinstance(tier, Tier)
        assert isinstance(tier.name, str) and tier.name
        assert isinstance(tier.durable, bool)

    def test_a_put_entry_reads_back_byte_for_byte(self, tier: Tier) -> None:
        entry = make_audio_entry(1)
        held = tier.put(entry, tenant="default")
        assert held is not None and held.blob == entry.blob  # the take held: this one
        got = tier.get(entry.header.key)
        assert got is not None
        assert got.blob == entry.blob and got.header == entry.header
        assert tier.contains(entry.header.key)

    def test_an_absent_key_is_a_miss(self, tier: Tier) -> None:
        assert tier.get("0" * 64) is None
        assert not tier.contains("0" * 64)
        assert tier.delete("0" * 64) is False

    def test_kinds_are_apart(self, tier: Tier) -> None:
        blob = make_blob_entry(7)
        assert tier.put(blob)
        assert tier.get(blob.header.key, "encoded").blob == blob.blob  # type: ignore[union-attr]
        assert tier.get(blob.header.key, "audio") is None

    def test_delete_removes_it(self, tier: Tier) -> None:
        entry = make_audio_entry(2)
        tier.put(entry)
        assert tier.delete(entry.header.key) is True
        assert tier.get(entry.header.key) is None
        assert not tier.contains(entry.header.key)

    def test_putting_the_same_key_twice_keeps_a_valid_entry(self, tier: Tier) -> None:
        entry = make_audio_entry(3)
        assert tier.put(entry)
        assert tier.put(entry)  # a second writer of the same take: still held
        assert tier.get(entry.header.key).blob == entry.blob  # type: ignore[union-attr]

    def test_an_expired_entry_is_a_miss_and_can_be_replaced(self, tier: Tier) -> None:
        old = make_audio_entry(4, ttl=1e-9)
        tier.put(old)
        assert tier.get(old.header.key) is None
        fresh = make_audio_entry(4)
        assert tier.put(fresh)
        assert tier.get(fresh.header.key).blob == fresh.blob  # type: ignore[union-attr]

    def test_stats_and_health_answer(self, tier: Tier) -> None:
        tier.put(make_audio_entry(5))
        stats: dict[str, Any] = tier.stats()
        assert isinstance(stats, dict)
        health = tier.health()
        assert isinstance(health, TierHealth) and health.state in ("ok", "degraded")

    def test_concurrent_writers_and_readers_of_one_key(self, tier: Tier) -> None:
        entry = make_audio_entry(6, frames=20000)
        errors: list[BaseException] = []
        seen: list[bytes] = []

        def work() -> None:
            try:
                for _ in range(20):
                    tier.put(entry)
                    got = tier.get(entry.header.key)
                    if got is not None:
                        seen.append(got.blob)
            except BaseException as exc:  # collected and re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert seen and all(blob == entry.blob for blob in seen)

    # -- one key, one take -----------------------------------------------------------
    def test_the_first_writer_wins_and_a_later_take_learns_which(self, tier: Tier) -> None:
        first, second = make_audio_entry(20), make_audio_entry(20, take=1)
        assert first.blob != second.blob and first.header.key == second.header.key
        assert tier.put(first).blob == first.blob  # type: ignore[union-attr]
        held = tier.put(second)  # a duplicate render of the same key, another take
        assert held is not None and held.blob == first.blob, "a later take replaced the first"
        assert tier.get(first.header.key).blob == first.blob  # type: ignore[union-attr]

    def test_replace_holds_the_published_take_whatever_was_there(self, tier: Tier) -> None:
        ours, published = make_audio_entry(21, take=1), make_audio_entry(21, take=2)
        tier.put(ours)
        assert tier.replace(published) is True
        assert tier.get(ours.header.key).blob == published.blob  # type: ignore[union-attr]
        assert tier.put(ours).blob == published.blob  # type: ignore[union-attr]
        fresh = make_audio_entry(22)
        assert tier.replace(fresh) is True  # nothing held before: held now
        assert tier.get(fresh.header.key).blob == fresh.blob  # type: ignore[union-attr]

    def test_concurrent_writers_of_different_takes_all_learn_one(self, tier: Tier) -> None:
        takes = [make_audio_entry(23, frames=20000, take=n) for n in range(8)]
        answers: list[bytes | None] = [None] * len(takes)
        errors: list[BaseException] = []
        start = threading.Barrier(len(takes))

        def work(n: int) -> None:
            try:
                start.wait()
                held = tier.put(takes[n])
                answers[n] = None if held is None else held.blob
            except BaseException as exc:  # collected and re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(len(takes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(set(answers)) == 1 and answers[0] is not None, "writers disagree"
        assert tier.get(takes[0].header.key).blob == answers[0]  # type: ignore[union-attr]

    # -- integrity ----------------------------------------------------------------------
    def test_a_damaged_object_is_never_served(self, tier: Tier) -> None:
        entry = make_audio_entry(8)
        tier.put(entry)
        try:
            self.corrupt(tier, entry)
        except NotImplementedError:
            pytest.skip(f"{type(tier).__name__} cannot be damaged from outside")
        assert tier.get(entry.header.key) is None
        again = make_audio_entry(8)
        assert tier.put(again)  # and the key can be stored again
        assert tier.get(again.header.key).blob == again.blob  # type: ignore[union-attr]

    def test_garbage_where_an_entry_belongs_is_a_miss(self, tier: Tier) -> None:
        entry = make_audio_entry(9)
        key = entry.header.key
        for junk in (b"", b"not a voxcache object", b"RIFF" + bytes(200), entry.blob[:-1],
                     entry.blob + b"\0"):
            self._plant(tier, key, "audio", junk)
            assert tier.get(key) is None, f"served {junk[:24]!r}…"
        assert tier.put(entry)  # what was refused does not block the real take
        assert tier.get(key).blob == entry.blob  # type: ignore[union-attr]

    def test_another_keys_entry_is_refused(self, tier: Tier) -> None:
        mine, other = make_audio_entry(10), make_audio_entry(11)
        self._plant(tier, mine.header.key, "audio", other.blob)
        assert tier.get(mine.header.key) is None
        assert tier.put(mine)
        assert tier.get(mine.header.key).blob == mine.blob  # type: ignore[union-attr]

    def test_another_kinds_entry_is_refused(self, tier: Tier) -> None:
        encoded = make_blob_entry(12)  # a valid entry of this key, but of kind "encoded"
        self._plant(tier, encoded.header.key, "audio", encoded.blob)
        assert tier.get(encoded.header.key, "audio") is None

    def test_a_ttl_runs_out_while_stored(self, tier: Tier) -> None:
        entry = make_audio_entry(13, ttl=0.5)
        assert tier.put(entry)
        assert tier.get(entry.header.key) is not None
        time.sleep(0.7)
        assert tier.get(entry.header.key) is None
        fresh = make_audio_entry(13)
        assert tier.put(fresh)  # the expired take gives way
        assert tier.get(fresh.header.key).blob == fresh.blob  # type: ignore[union-attr]

    def test_deleting_one_kind_keeps_the_others(self, tier: Tier) -> None:
        audio = make_audio_entry(14)
        encoded = blob_entry(audio.header.key, "encoded", b"x" * 500, "audio/mpeg")
        assert tier.put(audio) and tier.put(encoded)
        assert tier.delete(audio.header.key, "encoded") is True
        assert tier.get(audio.header.key, "encoded") is None
        assert tier.get(audio.header.key, "audio").blob == audio.blob  # type: ignore[union-attr]
