"""``python -m bench.chaos --kills 1000``: kill -9 cache writers at random instants, then
check that nothing torn was ever served and nothing is left over after a restart.

Writers (forked processes) render and store takes into one cache folder through
``CachedEngine``; readers (other processes) serve takes from the same folder the whole
time and check each against a fresh render of the deterministic engine. The supervisor
SIGKILLs writers — at a uniformly random instant of their life, or aimed into the store
(``Cache.put``) — and restarts them until ``--kills`` kills have happened. Then it restarts
the cache on the folder, counts leftovers and verifies every stored take. Exit status 1
when a promise broke (a torn or wrong take served or stored, a leftover after restart).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..helpers.machine import cpu_model
from .audit import TEMP_MARK, Survey, restart, survey, verify
from .board import STRIDE, Board, Field, Phase
from .report import print_table
from .workload import Workload, run_reader, run_writer

LIFE_SECONDS = {"tone": 0.5, "piper": 4.0}
"""A uniform kill lands at U(0, this) seconds after the writer has loaded its engine (so
the clock covers opening the cache, the start-up sweep and the write loop, not the
model load)."""
TONE_RENDER_DELAY = 0.01
"""Simulated model seconds per sentence for the tone engine: renders take time, as real
ones do, so a writer's life holds a handful of takes rather than hundreds."""
AIM_PATIENCE = {"tone": 2.0, "piper": 20.0}
"""An aimed kill waits this long after the fork for the writer to enter ``Cache.put``, then
fires anyway."""
WARM_UP_PATIENCE = {"tone": 10.0, "piper": 120.0}
"""Kills wait for the first stored take and for every reader to be reading (readers with
nothing to check would prove nothing), at most this long after the start."""
POLL = 0.0001
LEFTOVERS = ("temp_files", "root_temp_files", "stray_files", "key_lock_files",
             "index_rows_without_files", "files_without_index_rows")
"""What must be gone once a fresh ``Cache`` has opened the folder (see ``chaos_audit``)."""


@dataclass(slots=True)
class Life:
    """One forked writer and how it is to die."""

    slot: int
    life: int
    pid: int
    aimed: bool
    deadline: float | None
    give_up: float


@dataclass(slots=True)
class Tally:
    """What the kills did."""

    kills: int = 0
    aimed: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    """Phase on the board at the instant of death, per kill."""
    aimed_phases: Counter[str] = field(default_factory=Counter)
    in_put: Counter[str] = field(default_factory=Counter)
    """Kills inside ``Cache.put``, by what the entry's folder showed right after."""
    temp_left: int = 0
    """Kills after which the dead writer's temp file was in the entry's folder."""
    crashes: list[str] = field(default_factory=list)
    """Writers that died of something other than our SIGKILL (must be empty)."""
    lives: list[tuple[int, int]] = field(default_factory=list)
    """(life, next seq) of every dead writer: the ids it may have stored."""
    puts_begun: int = 0
    puts_done: int = 0
    takes: int = 0


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=1000, help="SIGKILLs to deliver")
    parser.add_argument("--engine", choices=("tone", "piper"), default="tone",
                        help="tone (deterministic stand-in) or piper (noise 0, 1 thread)")
    parser.add_argument("--writers", type=int, default=3, help="writer processes at once")
    parser.add_argument("--readers", type=int, default=2, help="reader processes")
    parser.add_argument("--aimed", type=float, default=0.5,
                        help="share of kills aimed into Cache.put (the rest: uniform)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill schedule")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work folder (default: a new temp folder, removed when clean)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    if args.kills < 1 or args.writers < 1 or args.readers < 0 or not 0 <= args.aimed <= 1:
        parser.error("need --kills >= 1, --writers >= 1, --readers >= 0, 0 <= --aimed <= 1")
    return args


def fork(target: Callable[..., None], *args: Any) -> int:
    """Run ``target`` in a forked child that never returns into our code."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            target(*args)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    return pid


class Supervisor:
    """Forks writers, kills them, restarts them, keeps the tally."""

    def __init__(self, args: argparse.Namespace, workload: Workload, root: Path,
                 logs: Path) -> None:
        self.args = args
        self.workload = workload
        self.root = root
        self.logs = logs
        self.board = Board(args.writers, args.readers)
        self.rng = random.Random(args.seed)
        self.tally = Tally()
        self.next_life = 1
        self.alive: list[Life] = []
        self.put_estimate = 0.0005
        self.started = time.monotonic()
        self.warm_up_seconds: float | None = None
        """Seconds from the start until the kills could begin."""

    def spawn(self, slot: int) -> None:
        """Fork a new writer life in ``slot`` and decide how it will die."""
        life = self.next_life
        self.next_life += 1
        self.board.reset(slot, 0, life)
        pid = fork(run_writer, self.board, slot, life, self.workload, self.root, self.logs)
        now = time.monotonic()
        aimed = self.rng.random() < self.args.aimed
        self.alive.append(Life(slot, life, pid, aimed, None,
                               now + AIM_PATIENCE[self.workload.engine_name]))

    def warmed_up(self, now: float) -> bool:
        """True once a take is stored and every reader is reading (or the patience ran
        out). On a loaded machine a Piper writer can take longer than its whole life to
        store its first take, and readers with nothing stored check nothing."""
        if self.warm_up_seconds is not None:
            return True
        board = self.board
        stored = any(board.get(board.writer_slot(i), Field.PUTS_DONE)
                     for i in range(self.args.writers))
        reading = all(board.get(slot, Field.PHASE) != Phase.LOADING
                      for slot in board.reader_slots)
        patience = WARM_UP_PATIENCE[self.workload.engine_name]
        if not (stored and reading) and now < self.started + patience:
            return False
        self.warm_up_seconds = now - self.started
        for life in self.alive:  # an aimed kill's patience counts from here
            life.give_up = max(life.give_up, now + AIM_PATIENCE[self.workload.engine_name])
        return True

    def arm(self, life: Life, now: float) -> None:
        """Set the instant of death once it can be chosen: for an aimed kill, when the
        writer is seen inside ``Cache.put``; for a uniform one, when its engine is loaded."""
        phase = self.board.get(life.slot, Field.PHASE)
        if life.aimed:
            if phase == Phase.PUT:
                life.deadline = now + self.rng.uniform(0, self.put_estimate)
            elif now >= life.give_up:
                life.deadline = now
        elif phase != Phase.LOADING:
            life.deadline = now + self.rng.uniform(0, LIFE_SECONDS[self.workload.engine_name])

    def run(self) -> None:
        """Kill until ``--kills`` kills; restart a writer only while more kills are due."""
        for slot in range(min(self.args.writers, self.args.kills)):
            self.spawn(self.board.writer_slot(slot))
        last_report = time.monotonic()
        while self.alive:
            now = time.monotonic()
            for life in list(self.alive):
                if life.deadline is None and self.warmed_up(now):
                    self.arm(life, now)
                if life.deadline is not None and now >= life.deadline:
                    self.kill(life)
                    if self.tally.kills + len(self.alive) < self.args.kills:
                        self.spawn(life.slot)
            if now - last_report > 10:
                last_report = now
                self.reap_crashed()
                print(f"  {self.tally.kills} kills, {self.tally.phases[Phase.PUT.name]} "
                      "inside Cache.put", file=sys.stderr, flush=True)
            self.pause()

    def pause(self) -> None:
        """Short sleeps while an aimed kill waits for a put; else sleep to the next death."""
        if self.warm_up_seconds is not None and any(
                life.aimed and life.deadline is None for life in self.alive):
            time.sleep(POLL)
            return
        nearest = min((life.deadline for life in self.alive if life.deadline is not None),
                      default=time.monotonic() + 0.005)
        time.sleep(min(0.005, max(0.0, nearest - time.monotonic())))

    def kill(self, life: Life) -> None:
        """SIGKILL one writer, wait for it, and read where it was from the board and disk."""
        self.alive.remove(life)
        with contextlib.suppress(ProcessLookupError):  # it may have died by itself
            os.kill(life.pid, signal.SIGKILL)
        _, status = os.waitpid(life.pid, 0)
        board, slot = self.board, life.slot
        self.tally.lives.append((life.life, board.get(slot, Field.NEXT_SEQ)))
        self.tally.puts_begun += board.get(slot, Field.PUTS_BEGUN)
        self.tally.puts_done += board.get(slot, Field.PUTS_DONE)
        self.tally.takes += board.get(slot, Field.TAKES)
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            self.tally.crashes.append(f"life {life.life}: wait status {status}")
            return
        self.tally.kills += 1
        self.tally.aimed += life.aimed
        phase = Phase(board.get(slot, Field.PHASE)).name
        self.tally.phases[phase] += 1
        if life.aimed:
            self.tally.aimed_phases[phase] += 1
        put_ns = board.get(slot, Field.PUT_NS)
        if put_ns:
            self.put_estimate = 0.8 * self.put_estimate + 0.2 * put_ns / 1e9
        key = board.key(slot)
        if not key:
            return
        folder = self.root / "objects" / key[:2] / key[2:4]
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            names = []
        temp = any(n.startswith(TEMP_MARK) and f"{life.pid}" in n for n in names)
        self.tally.temp_left += temp
        if phase == Phase.PUT.name:
            published = any(n.startswith(key) for n in names)
            self.tally.in_put[_where_in_put(temp, published)] += 1

    def reap_crashed(self) -> None:
        """Writers that exited by themselves (a bug, not a kill): note them and replace them."""
        for life in list(self.alive):
            pid, status = os.waitpid(life.pid, os.WNOHANG)
            if pid:
                self.alive.remove(life)
                self.tally.crashes.append(f"life {life.life}: exited by itself, status {status}")
                if len(self.tally.crashes) > 20:
                    raise RuntimeError("writers keep dying by themselves; see the logs: "
                                       + "; ".join(self.tally.crashes[:3]))
                self.spawn(life.slot)


def _where_in_put(temp_left: bool, published: bool) -> str:
    """Name where inside ``Cache.put`` a kill landed, from what the folder shows."""
    if temp_left and not published:
        return "writing the temp file (not published)"
    if temp_left:
        return "between publish and temp cleanup"
    if published:
        return "after publish (index row, memory tier)"
    return "before the temp file existed"


def stop_readers(board: Board, pids: list[int], wait: float) -> list[str]:
    """Ask readers to finish; SIGKILL any that do not within ``wait`` seconds."""
    board.stop()
    problems = []
    deadline = time.monotonic() + wait
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                pending.remove(pid)
                if status:
                    problems.append(f"reader {pid} exited with status {status}")
        time.sleep(0.05)
    for pid in pending:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        problems.append(f"reader {pid} did not stop within {wait:.0f} s and was killed")
    return problems


def attempted_ids(lives: list[tuple[int, int]]) -> list[int]:
    """Every request id a writer may have stored."""
    return [life * STRIDE + seq for life, next_seq in lives for seq in range(next_seq)]


def main(argv: list[str] | None = None) -> int:
    """Run the chaos, audit the folder, print and write the figures."""
    args = parse(list(sys.argv[1:] if argv is None else argv))
    work = args.dir or Path(tempfile.mkdtemp(prefix="voxcache-chaos-"))
    root, logs, evidence = work / "cache", work / "logs", work / "evidence"
    if root.exists() and any(root.iterdir()):
        print(f"{root} is not empty: the audit must know every request that made an entry, "
              "so give --dir a new folder", file=sys.stderr)
        return 2
    logs.mkdir(parents=True, exist_ok=True)
    delay = TONE_RENDER_DELAY if args.engine == "tone" else 0.0
    workload = Workload(args.engine, delay)
    # Create the folder once, as `voxcache serve` does before its workers start; in a child,
    # so this process never has a thread (a Cache's) when it forks.
    _, status = os.waitpid(fork(restart, root), 0)
    if status:
        print(f"cannot open a cache in {root} (see above)", file=sys.stderr)
        return 2
    started = time.monotonic()
    supervisor = Supervisor(args, workload, root, logs)
    readers = [fork(run_reader, supervisor.board, supervisor.board.reader_slot(i), workload,
                    root, logs, evidence, args.seed * 1000 + i) for i in range(args.readers)]
    print(f"chaos: {args.kills} kills, {args.writers} writers, {args.readers} readers, "
          f"engine {args.engine}, folder {work}", file=sys.stderr, flush=True)
    try:
        supervisor.run()
    finally:
        for life in supervisor.alive:  # only on an error: never leave writers behind
            os.kill(life.pid, signal.SIGKILL)
            os.waitpid(life.pid, 0)
        reader_problems = stop_readers(supervisor.board, readers,
                                       60.0 if args.engine == "piper" else 15.0)
    run_seconds = time.monotonic() - started
    print("  kills done; restarting the cache and verifying every stored take",
          file=sys.stderr, flush=True)
    before = survey(root)
    restart(root)
    after = survey(root)
    audit_started = time.monotonic()
    checked = verify(root, workload, attempted_ids(supervisor.tally.lives))
    figures = assemble(args, supervisor, before, after, checked.figures(), reader_problems,
                       run_seconds, time.monotonic() - audit_started)
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    clean = not figures["broken_promises"]
    if clean and not args.keep and args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder kept: {work}", file=sys.stderr)
    return 0 if clean else 1


def assemble(args: argparse.Namespace, supervisor: Supervisor, before: Survey, after: Survey,
             checked: dict[str, Any], reader_problems: list[str], run_seconds: float,
             audit_seconds: float) -> dict[str, Any]:
    """Every figure of the run, as written to JSON."""
    tally, board = supervisor.tally, supervisor.board
    readers = board.reader_slots
    mid_write = tally.phases[Phase.PUT.name] if tally.puts_begun else None
    after_figures = after.figures()
    leftovers = {name: after_figures[name] for name in LEFTOVERS}
    figures: dict[str, Any] = {
        "parameters": {"kills": args.kills, "engine": args.engine, "writers": args.writers,
                       "readers": args.readers, "aimed_share": args.aimed, "seed": args.seed,
                       "uniform_life_seconds": LIFE_SECONDS[args.engine],
                       "tone_render_delay": TONE_RENDER_DELAY if args.engine == "tone" else None},
        "machine": {"cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
                    "cpu": cpu_model(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "library": _library(),
        "seconds": {"warm_up": round(supervisor.warm_up_seconds or 0.0, 1),
                    "kills": round(run_seconds, 1), "audit": round(audit_seconds, 1)},
        "kills": {
            "total": tally.kills, "aimed": tally.aimed, "uniform": tally.kills - tally.aimed,
            "mid_write": mid_write,
            "mid_write_method": "shared-memory marker: the writer stores PUT on the board just "
                                "before Cache.put and AFTER_PUT just after it returns; a kill is "
                                "mid-write when the board still says PUT after waitpid",
            "mid_write_where": dict(tally.in_put),
            "temp_file_left": tally.temp_left,
            "temp_file_method": "the entry's folder, listed right after waitpid, held a temp "
                                "file named with the dead writer's pid (a lower bound: a "
                                "restarting writer's start-up sweep may remove it first)",
            "phase_at_death": dict(tally.phases),
            "aimed_phase_at_death": dict(tally.aimed_phases),
            "writer_crashes": tally.crashes,
            "writes_begun": tally.puts_begun, "writes_finished": tally.puts_done,
            "takes_finished": tally.takes,
        },
        "readers": {"served": board.total(Field.SERVED, readers),
                    "torn_or_wrong_served": board.total(Field.TORN, readers),
                    "misses": board.total(Field.MISSES, readers),
                    "errors": board.total(Field.ERRORS, readers),
                    "fresh_renders": board.total(Field.FRESH_RENDERS, readers),
                    "problems": reader_problems},
        "before_restart": before.figures(),
        "after_restart": after_figures,
        "leftovers_after_restart": leftovers,
        "verification": checked,
    }
    figures["broken_promises"] = broken_promises(figures)
    return figures


def broken_promises(figures: dict[str, Any]) -> list[str]:
    """Which promises the run saw broken (an unmeasurable leftover counts as broken)."""
    broken = []
    if figures["readers"]["torn_or_wrong_served"]:
        broken.append("a torn or wrong take was served")
    if figures["readers"]["errors"]:
        broken.append("Cache.get raised instead of missing")
    if figures["readers"]["problems"]:
        broken.append("a reader failed")
    if figures["kills"]["writer_crashes"]:
        broken.append("a writer died by itself")
    check = figures["verification"]
    if check["mismatched"] or check["unknown"]:
        broken.append("a stored take differs from a fresh render")
    for name, count in figures["leftovers_after_restart"].items():
        if count is None or count:
            broken.append(f"leftover after restart: {name} = {count}")
    return broken


def _library() -> dict[str, str | None]:
    """Which voxcache was measured: its folder and, inside a git checkout, the commit."""
    import voxcache

    folder = Path(voxcache.__file__).parent
    try:
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "."],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"path": str(folder), "git_commit": None}
    return {"path": str(folder), "git_commit": commit + (" with uncommitted changes"
                                                          if dirty else "")}


if __name__ == "__main__":
    sys.exit(main())
