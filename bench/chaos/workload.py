"""What the chaos run's processes do: the requests, the writers' loop, the readers' check.

Every request is a pure function of its id, so any process — a reader during the run, the
audit after it — can re-create it, key it and render it afresh, and compare samples with
what the cache holds. Everything goes through voxcache's public API (``Cache``,
``CachedEngine``, ``SynthesisRequest``, ``load_engine``); the one hook is a ``Cache``
subclass that marks the board around ``put``, which is how a kill is known to have landed
inside the store.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxcache import Audio, Cache, CacheConfig, CachedEngine, Engine, SynthesisRequest, load_engine
from voxcache.entry import Entry

from .board import STRIDE, Board, Field, Phase

WORDS = ("platform", "train", "doors", "closing", "please", "stand", "clear", "next", "stop",
         "north", "south", "station", "arriving", "delayed", "minutes", "service", "express",
         "local", "transfer", "boarding", "gate", "flight", "welcome", "thank", "you", "for",
         "waiting", "order", "ready", "counter", "number", "seven", "twelve", "morning")
COLLIDE = 0.2
"""Share of a writer's takes that ask for a key another writer is rendering right now, so
the per-key lock is held by processes that get killed."""
WRITER_NICE = 5
"""Workers run at a lower priority than the supervisor, so its kills land when it means
them to (on 2 cores the supervisor would otherwise wait behind them)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """The engine and the request for each id."""

    engine_name: str
    render_delay: float
    """Tone only: simulated model seconds per sentence in the writers (not in the key and
    not in the samples, so reference renders skip it)."""

    def engine(self) -> Engine:
        """A fresh engine; Piper at one thread (byte-deterministic at a fixed count)."""
        if self.engine_name == "piper":
            return load_engine("piper", threads=1)
        return load_engine("tone")

    def request(self, rid: int, *, reference: bool = False) -> SynthesisRequest:
        """The request of id ``rid``; ``reference`` drops the tone engine's model delay."""
        rng = random.Random(rid)
        if self.engine_name == "piper":
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10)))
            return SynthesisRequest(f"Announcement {rid}, {words}.",
                                    params={"noise_scale": 0.0, "noise_w_scale": 0.0})
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 25))).capitalize()
                     + "." for _ in range(rng.randint(1, 4))]
        delay = 0.0 if reference else self.render_delay
        return SynthesisRequest(f"Take {rid}. " + " ".join(sentences), params={"delay": delay})


def fresh_render(workload: Workload, cached: CachedEngine, rid: int) -> Audio:
    """Render request ``rid`` straight through the engine, bypassing every cache."""
    resolved = cached.resolve(workload.request(rid, reference=True))
    return Audio.join(list(cached.engine.render(resolved)))


def same_take(entry: Entry, expected: Audio) -> bool:
    """True when a served entry holds exactly the expected samples."""
    served = entry.audio()
    return (served.sample_rate, served.channels, served.pcm) == (
        expected.sample_rate, expected.channels, expected.pcm)


def log_to(path: Path) -> None:
    """Send this process's voxcache warnings to a file (a forked child has no console)."""
    logging.basicConfig(filename=path, level=logging.WARNING, force=True,
                        format=f"%(asctime)s pid {os.getpid()} %(name)s: %(message)s")


class MarkedCache(Cache):
    """A ``Cache`` that marks the board before and after every store."""

    def __init__(self, root: Path, board: Board, slot: int) -> None:
        super().__init__(root)
        self.board = board
        self.slot = slot

    def put(self, entry: Entry, **options: Any) -> bool:
        """``Cache.put``, bracketed by marks a SIGKILL cannot undo."""
        board, slot = self.board, self.slot
        board.set(slot, Field.PHASE, Phase.PUT)
        board.add(slot, Field.PUTS_BEGUN)
        started = time.perf_counter_ns()
        stored = super().put(entry, **options)
        board.set(slot, Field.PUT_NS, time.perf_counter_ns() - started)
        board.set(slot, Field.PHASE, Phase.AFTER_PUT)
        board.add(slot, Field.PUTS_DONE)
        return stored


def run_writer(board: Board, slot: int, life: int, workload: Workload, root: Path,
               logs: Path) -> None:
    """Render and store takes until killed; every step is marked on the board first."""
    os.nice(WRITER_NICE)
    log_to(logs / "writers.log")
    board.set(slot, Field.PID, os.getpid())
    engine = workload.engine()
    board.set(slot, Field.PHASE, Phase.STARTING)
    cached = CachedEngine(engine, MarkedCache(root, board, slot))
    rng = random.Random(life)
    seq = 0
    while True:
        board.set(slot, Field.PHASE, Phase.CHOOSING)
        racing = board.requests_in_flight()
        if racing and rng.random() < COLLIDE:
            rid = rng.choice(racing)
        else:
            rid = life * STRIDE + seq
            seq += 1
            board.set(slot, Field.NEXT_SEQ, seq)
        request = workload.request(rid)
        _, key = cached.resolve_and_key(request)
        board.set(slot, Field.REQUEST, rid)
        board.set_key(slot, key)
        board.set(slot, Field.PHASE, Phase.RENDERING)
        cached.synthesize(request)
        board.set(slot, Field.PHASE, Phase.CHOOSING)
        board.set(slot, Field.LAST_DONE, rid)
        board.add(slot, Field.TAKES)


def pick_request(board: Board, rng: random.Random) -> int | None:
    """What a reader asks for: mostly what is being written now, then what just was, then
    anything older (which may have been stored, or never finished)."""
    roll = rng.random()
    if roll < 0.5:
        racing = board.requests_in_flight()
        if racing:
            return rng.choice(racing)
    if roll < 0.8:
        done = board.requests_done()
        if done:
            return rng.choice(done)
    lives = board.lives_started()
    if lives < 1:
        return None
    return rng.randint(1, lives) * STRIDE + rng.randint(0, 7)


def run_reader(board: Board, slot: int, workload: Workload, root: Path, logs: Path,
               evidence: Path, seed: int) -> None:
    """Serve takes from the cache while writers die around it; check each against a fresh
    render. A memory budget of 0 sends every lookup to the disk, where the races are."""
    os.nice(WRITER_NICE)
    log_to(logs / "readers.log")
    board.set(slot, Field.PID, os.getpid())
    cache = Cache(root, CacheConfig(memory_default_budget=0))
    cached = CachedEngine(workload.engine(), cache)
    board.set(slot, Field.PHASE, Phase.CHOOSING)  # reading: the kills may begin
    rng = random.Random(seed)
    expected: dict[int, Audio] = {}
    try:
        while not board.stopped:
            rid = pick_request(board, rng)
            if rid is None:
                time.sleep(0.002)
                continue
            _, key = cached.resolve_and_key(workload.request(rid))
            try:
                found = cache.get(key)
            except Exception as exc:  # counted: the promise is that a fault is a miss
                board.add(slot, Field.ERRORS)
                logging.getLogger("chaos.reader").error("Cache.get(%s) raised %r", key, exc)
                continue
            if found is None:
                board.add(slot, Field.MISSES)
                time.sleep(0.002)
                continue
            board.add(slot, Field.SERVED)
            if rid not in expected:
                if len(expected) > 4096:
                    expected.clear()
                expected[rid] = fresh_render(workload, cached, rid)
                board.add(slot, Field.FRESH_RENDERS)
            if not same_take(found[0], expected[rid]):
                board.add(slot, Field.TORN)
                keep_evidence(evidence, rid, key, found[0], found[1])
    finally:
        cache.close()


def keep_evidence(folder: Path, rid: int, key: str, entry: Entry, tier: str) -> None:
    """Keep a wrongly served take and what it was, for the report."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.served.wav").write_bytes(entry.blob)
    with (folder / "torn.jsonl").open("a") as out:
        out.write(json.dumps({"request": rid, "key": key, "tier": tier,
                              "reader_pid": os.getpid()}) + "\n")
