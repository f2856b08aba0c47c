"""One synthesis per key, however many threads and processes ask at once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from voxcache.request import SynthesisRequest as R
from voxcache.singleflight import FlightGroup, key_lock
from voxcache.testing import forked

WORKER = Path(__file__).with_name("stampede_worker.py")


def stampede(cache_dir: Path, engine: str, text: str, processes: int = 4, threads: int = 8):
    start_at = time.time() + (6.0 if engine == "piper" else 2.0)  # after every process loaded
    procs = [forked.popen([sys.executable, str(WORKER), str(cache_dir), engine, text,
                           str(start_at), str(threads)], stdout=subprocess.PIPE, text=True)
             for _ in range(processes)]
    outputs = [json.loads(p.communicate(timeout=180)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outputs


@pytest.mark.slow
def test_4_processes_x_8_threads_render_once(cache_dir):
    outputs = stampede(cache_dir, "tone", "A brand new sentence nobody asked for before.")
    assert sum(o["renders"] for o in outputs) == 1
    statuses = Counter(s for o in outputs for s in o["statuses"])
    assert statuses["miss"] == 1 and sum(statuses.values()) == 32
    assert set(statuses) <= {"miss", "joined", "hit"}


@pytest.mark.slow
@pytest.mark.piper
def test_4_processes_x_8_threads_render_once_with_piper(cache_dir):
    outputs = stampede(cache_dir, "piper", "The next train to Central Station arrives soon.")
    assert sum(o["renders"] for o in outputs) == 1
    assert all(o["distinct"] == 1 for o in outputs)  # every caller got the one take


def test_threads_in_one_process_share_one_render(cached_tone, tone):
    results = []

    def ask():
        results.append(cached_tone.synthesize(R("Thread stampede.", params={"delay": 0.3})))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(tone.calls) == 1
    assert Counter(r.cache for r in results)["miss"] == 1
    assert len({r.audio.pcm for r in results}) == 1


def test_a_failed_render_reaches_every_waiter_and_is_not_cached(cached_tone, tone):
    calls = []

    def failing(request):
        calls.append(1)
        time.sleep(0.2)
        raise RuntimeError("model crashed")

    tone.render = failing
    errors = []

    def ask():
        try:
            cached_tone.synthesize(R("This will fail."))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 5 and len(calls) == 1
    assert "model crashed" in str(errors[0])
    assert cached_tone.cache.get(cached_tone.key_of(cached_tone.resolve(R("This will fail."))))\
        is None
    assert len(cached_tone.flights) == 0


def test_key_lock_is_exclusive_and_bounded(tmp_path):
    with key_lock(tmp_path, "ab" * 32, wait=1) as first:
        assert first
        script = ("import sys; from pathlib import Path; from voxcache.singleflight import "
                  "key_lock\nwith key_lock(Path(sys.argv[1]), 'ab'*32, wait=0.3) as got: "
                  "print(got)")
        out = forked.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, check=True)
        assert out.stdout.strip() == "False"
    out = forked.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                     text=True, check=True)
    assert out.stdout.strip() == "True"


def test_lock_of_a_killed_holder_is_released(tmp_path):
    script = ("import sys, time; from pathlib import Path; from voxcache.singleflight import "
              "key_lock\nwith key_lock(Path(sys.argv[1]), 'cd'*32, wait=1):\n"
              "    print('held', flush=True); time.sleep(60)")
    holder = forked.popen([sys.executable, "-c", script, str(tmp_path)],
                          stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    with key_lock(tmp_path, "cd" * 32, wait=2) as got:
        assert got


def test_followers_stream_what_exists_then_live():
    group = FlightGroup()
    flight, leader = group.join_or_lead("k")
    assert leader
    same, follower_leads = group.join_or_lead("k")
    assert same is flight and not follower_leads
    from voxcache.audio import Audio

    chunk = Audio(b"\x01\x00" * 10, 16000)
    flight.chunk(chunk)
    got = []

    def follow():
        got.extend(flight.follow(timeout=5))

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.1)
    flight.chunk(chunk)
    flight.land("done")
    group.done("k", flight)
    t.join(5)
    assert got == [chunk, chunk]


def test_an_async_waiter_timing_out_does_not_cancel_the_shared_render(cached_tone, tone):
    import asyncio

    cached_tone.lock_wait = 0.2
    request = R("A slow render.", params={"delay": 0.6})
    leader = threading.Thread(target=lambda: results.append(cached_tone.synthesize(request)))
    results = []
    leader.start()
    while not cached_tone.flights.get(cached_tone.resolve_and_key(request)[1]):
        time.sleep(0.01)

    async def impatient():
        try:
            await cached_tone.asynthesize(request)
        except TimeoutError:
            return "timed out"

    assert asyncio.run(impatient()) == "timed out"
    leader.join(10)
    assert results and results[0].cache == "miss"  # the leader's render was not cancelled
    assert len(tone.calls) == 1


def test_waiters_get_the_take_before_its_write_and_keep_it_if_the_write_fails(
        cache, gated_tone) -> None:
    """Joiners used to be released only after the take was on disk and indexed (7-13 ms
    after the render, in the stampede benchmark). They now get it as soon as it exists;
    the write happens once, after, and a write that fails takes nothing from them."""
    from voxcache.cached import CachedEngine

    cached = CachedEngine(gated_tone, cache)
    written, release = threading.Event(), threading.Event()
    real_put = cache.put

    def slow_failing_put(entry, **kwargs):
        release.wait(10)  # the disk write is slow ...
        written.set()
        return False  # ... and then fails (a full disk)

    cache.put = slow_failing_put  # type: ignore[method-assign]
    gated_tone.gate.clear()
    results, done_before_write = [], []

    def ask() -> None:
        results.append(cached.synthesize(R("Waiters wake at once.")))
        done_before_write.append(not written.is_set())

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    while len(cached.flights) == 0 or cached.flights.get(
            cached.resolve_and_key(R("Waiters wake at once."))[1]).followers < 3:
        time.sleep(0.005)
    gated_tone.gate.set()
    deadline = time.monotonic() + 10
    while sum(done_before_write) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sum(done_before_write) == 3, "the joiners waited for the disk write"
    release.set()
    for t in threads:
        t.join(10)
    cache.put = real_put  # type: ignore[method-assign]
    assert len({r.audio.pcm for r in results}) == 1 and len(gated_tone.calls) == 1
    assert sorted(r.cache for r in results) == ["joined", "joined", "joined", "miss"]
    leader = next(r for r in results if r.cache == "miss")
    assert leader.stored is False  # the leader learns the write's fate


def test_a_follower_wakes_when_the_take_exists_not_when_the_flight_lands() -> None:
    """A follower that has every chunk so far sleeps until the flight changes. It used to be
    woken only by ``land`` (after the leader's write) or a new chunk: a leader that set its
    result after the follower went to sleep left it waiting out the whole write."""
    from voxcache.singleflight import Flight

    flight = Flight()
    flight.chunk(b"chunk")  # type: ignore[arg-type]
    got: list[object] = []
    follower = threading.Thread(target=lambda: got.extend(flight.follow(5)))
    follower.start()
    time.sleep(0.2)  # the follower has the chunk and sleeps, waiting for more or the end
    flight.settle("the take")  # not landed: the leader is still writing
    follower.join(1)
    assert not follower.is_alive(), "the follower slept through the take's arrival"
    assert got == [b"chunk"]


def test_joiners_on_the_loop_get_the_take_before_its_write(cache, gated_tone) -> None:
    """The service's form: callers on one event loop ask for a key a miss thread is rendering.
    They used to share that miss thread's whole job, so they were answered only after the
    take was written and indexed; now they are answered the moment it exists, the write
    still happens once, a failed write takes nothing from them, and a joiner that gives up
    leaves the others their wait."""
    import asyncio

    from voxcache.cached import CachedEngine

    cached = CachedEngine(gated_tone, cache)
    release = threading.Event()
    puts: list[str] = []

    def slow_failing_put(entry, **kwargs):
        puts.append(entry.header.key)
        release.wait(30)  # the disk write is slow ...
        return False  # ... and then fails (a full disk)

    cache.put = slow_failing_put  # type: ignore[method-assign]
    request = R("Joiners on the loop wake at once.")
    gated_tone.gate.clear()

    async def scenario():
        # all in one tick, as a burst of requests arrives. Whichever caller's storage read
        # answers first starts the miss (under load it is not always the first created);
        # the others join it before its thread leads a flight.
        callers = [asyncio.ensure_future(cached.take(request)) for _ in range(6)]
        quitter = asyncio.ensure_future(cached.take(request))
        await asyncio.sleep(0.2)
        quitter.cancel()
        gated_tone.gate.set()
        waiting = set(callers)
        deadline = time.monotonic() + 5
        while len(waiting) > 1 and time.monotonic() < deadline:  # all but the starter
            _, waiting = await asyncio.wait(waiting, timeout=0.05)
        answered_before_write = [c for c in callers if c.done()]
        release.set()
        await asyncio.wait(callers, timeout=10)
        return answered_before_write, [c.result().result for c in callers]

    try:
        answered, results = asyncio.run(scenario())
    finally:
        release.set()
    started = [r for r in results if r.cache == "miss"]
    joined = [r for r in results if r.cache == "joined"]
    # the starter alone waits for its write; if the quitter happened to start the miss,
    # all six callers joined it
    assert len(started) <= 1 and len(joined) == 6 - len(started)
    assert len(answered) == 6 - len(started), "the joiners waited for the disk write"
    assert {r.audio.pcm for r in results} == {results[0].audio.pcm}
    assert all(r.stored is False for r in started)
    assert len(gated_tone.calls) == 1 and len(puts) == 1


def test_the_leader_hands_over_only_when_someone_waits(cache, gated_tone, monkeypatch) -> None:
    """The 0.3 ms hand-over before the write is for waiters; a miss nobody joined (every
    single request the service renders) must not pay it."""
    import asyncio

    import voxcache.cached as cached_module

    slept: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(cached_module.time, "sleep",
                        lambda seconds: (slept.append(seconds), real_sleep(seconds))[1])
    cached = cached_module.CachedEngine(gated_tone, cache)
    handoff = cached_module.HANDOFF_SECONDS

    asyncio.run(cached.take(R("Nobody else asks for this one.")))
    assert handoff not in slept, "a lone miss paid the hand-over"

    gated_tone.gate.clear()
    request = R("Two callers ask for this one.")
    threads = [threading.Thread(target=cached.synthesize, args=(request,)) for _ in range(2)]
    for t in threads:
        t.start()
    key = cached.resolve_and_key(request)[1]
    while cached.flights.get(key) is None or cached.flights.get(key).followers < 1:
        real_sleep(0.005)
    gated_tone.gate.set()
    for t in threads:
        t.join(10)
    assert slept.count(handoff) == 1, "the leader did not hand over to its follower"
