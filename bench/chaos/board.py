"""The chaos run's notice board: a page of shared memory whose marks survive ``kill -9``.

Why shared memory and not a pipe: a writer killed with SIGKILL cannot say where it was,
so it must have said so *before* every step. Each mark is one aligned 8-byte store into an
anonymous ``MAP_SHARED`` page inherited across ``fork``; the store is visible to the
supervisor at once and stays in the page after the writer's death, so after ``waitpid``
the supervisor reads exactly the last step the writer had begun. No lock is ever taken:
each slot has a single writer (the process that owns it), so a kill can strand nothing.
"""

from __future__ import annotations

import mmap
from enum import IntEnum

import numpy as np


class Phase(IntEnum):
    """Where a writer is. ``PUT`` spans the whole ``Cache.put`` call: temp file, publish,
    index row, memory tier. A reader's slot says ``LOADING`` until it reads, then
    ``CHOOSING``."""

    LOADING = 0
    """Forked; loading the engine (no cache open yet: the uniform kill clock waits)."""
    STARTING = 1
    """Opening the cache (the start-up sweep runs in its background thread)."""
    CHOOSING = 2
    """Between takes: picking and keying the next request."""
    RENDERING = 3
    """Inside ``CachedEngine.synthesize`` before the store: lookup, key lock, engine."""
    PUT = 4
    """Inside ``Cache.put``: the disk write and publish window."""
    AFTER_PUT = 5
    """``Cache.put`` returned; the rest of ``synthesize`` (alias, counters, lock release)."""


class Field(IntEnum):
    """Columns of a slot (int64 each)."""

    PID = 0
    LIFE = 1
    PHASE = 2
    REQUEST = 3
    """The request id being served (valid from CHOOSING on)."""
    NEXT_SEQ = 4
    """This life's own ids ``life * STRIDE + [0, NEXT_SEQ)`` may have been attempted."""
    PUTS_BEGUN = 5
    PUTS_DONE = 6
    PUT_NS = 7
    """Duration of the last completed ``Cache.put`` (nanoseconds)."""
    TAKES = 8
    """Takes this life finished (synthesize returned)."""
    SERVED = 9
    """Readers: takes the cache served."""
    MISSES = 10
    """Readers: lookups that found nothing (not stored yet, or never)."""
    TORN = 11
    """Readers: served takes whose samples differ from a fresh render."""
    FRESH_RENDERS = 12
    """Readers: reference renders made to check against."""
    ERRORS = 13
    """Readers: exceptions raised by ``Cache.get`` (should stay 0: a fault is a miss)."""
    LAST_DONE = 14
    """Writers: id of the last take ``synthesize`` returned (-1 before the first)."""


FIELDS = len(Field)
KEY_BYTES = 64
STRIDE = 1_000_000
"""Request ids of writer life ``L`` are ``L * STRIDE + seq``."""


class Board:
    """Slots for writers and readers, plus a stop flag, in one shared anonymous mapping."""

    def __init__(self, writers: int, readers: int) -> None:
        self.writers = writers
        self.readers = readers
        rows = writers + readers + 1  # the last row holds the stop flag
        ints = rows * FIELDS * 8
        self._map = mmap.mmap(-1, ints + rows * KEY_BYTES)  # MAP_SHARED | MAP_ANONYMOUS
        self._ints = np.frombuffer(self._map, dtype=np.int64, count=rows * FIELDS).reshape(
            rows, FIELDS)
        self._keys = np.frombuffer(self._map, dtype=f"S{KEY_BYTES}", count=rows, offset=ints)
        self._stop_row = rows - 1

    # -- slots -----------------------------------------------------------------
    def writer_slot(self, index: int) -> int:
        """Row of writer ``index``."""
        return index

    def reader_slot(self, index: int) -> int:
        """Row of reader ``index``."""
        return self.writers + index

    def reset(self, slot: int, pid: int, life: int) -> None:
        """Start a new life in ``slot`` (the supervisor does this before forking)."""
        self._ints[slot, :] = 0
        self._ints[slot, Field.PID] = pid
        self._ints[slot, Field.LIFE] = life
        self._ints[slot, Field.LAST_DONE] = -1
        self._keys[slot] = b""

    def set(self, slot: int, field: Field, value: int) -> None:
        """One aligned 8-byte store: visible to others at once, kept after a kill."""
        self._ints[slot, field] = value

    def add(self, slot: int, field: Field, delta: int = 1) -> None:
        """Increment a counter the slot's owner alone writes."""
        self._ints[slot, field] += delta

    def get(self, slot: int, field: Field) -> int:
        """Read one field."""
        return int(self._ints[slot, field])

    def set_key(self, slot: int, key: str) -> None:
        """Note the key being served (written before the phase that uses it)."""
        self._keys[slot] = key.encode()

    def key(self, slot: int) -> str:
        """The key last noted in ``slot``."""
        return bytes(self._keys[slot]).decode()

    def total(self, field: Field, slots: range) -> int:
        """Sum of one field over some slots."""
        return int(self._ints[slots.start:slots.stop, field].sum())

    @property
    def reader_slots(self) -> range:
        """Rows of the readers."""
        return range(self.writers, self.writers + self.readers)

    # -- what readers look at ----------------------------------------------------
    def requests_in_flight(self) -> list[int]:
        """Ids writers are rendering or storing right now (what a reader races)."""
        # One copy, so each field is read once: a slot being reset for a new life can still
        # pair an old phase with the zeroed request (no id of any life), which is dropped.
        rows = self._ints[: self.writers].copy()
        busy = (rows[:, Field.PHASE] >= Phase.RENDERING) & (rows[:, Field.PHASE] <= Phase.PUT)
        busy &= rows[:, Field.REQUEST] >= STRIDE
        return [int(r) for r in rows[busy, Field.REQUEST]]

    def requests_done(self) -> list[int]:
        """Ids writers finished last (stored, unless the store failed)."""
        return [int(r) for r in self._ints[: self.writers, Field.LAST_DONE].copy() if r >= 0]

    def lives_started(self) -> int:
        """Highest life number any writer slot holds (ids below it may be stored)."""
        return int(self._ints[: self.writers, Field.LIFE].max(initial=0))

    # -- stop ----------------------------------------------------------------------
    def stop(self) -> None:
        """Tell readers to finish."""
        self._ints[self._stop_row, 0] = 1

    @property
    def stopped(self) -> bool:
        """True once the supervisor asked readers to finish."""
        return bool(self._ints[self._stop_row, 0])
