"""The chaos command works, and its checks can fail.

A short run of ``python -m bench.chaos`` (20 SIGKILLs, tone engine) must report no torn or
wrong take served, every stored take equal to a fresh render and nothing left over after
a restart. The checks themselves are attacked too: a take with a valid envelope but
another request's samples, planted under a key, must be counted as torn by a reader and
as mismatched by the audit; a file cut in half must never be served. The full run (1,000
kills) is outside CI; its figures are in docs/internals/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.chaos.audit import survey, verify
from bench.chaos.board import STRIDE, Field, Phase
from bench.chaos.harness import (
    AIM_PATIENCE,
    WARM_UP_PATIENCE,
    Life,
    Supervisor,
    broken_promises,
    parse,
)
from bench.chaos.workload import Workload, fresh_render
from voxcache import Cache, CachedEngine
from voxcache.entry import audio_entry
from voxcache.testing import forked

REPO = Path(__file__).resolve().parent.parent
TONE = Workload("tone", 0.0)
GOOD, WRONG, TORN = STRIDE, STRIDE + 1, STRIDE + 2


def run_chaos(work: Path, *options: str) -> dict[str, Any]:
    """Run the command in its own process; return its JSON figures and exit status."""
    out = work / "chaos.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.chaos", "--dir", str(work / "run"), "--json", str(out),
         *options], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert out.exists(), f"no figures written:\n{proc.stdout}\n{proc.stderr}"
    return {**json.loads(out.read_text()), "returncode": proc.returncode,
            "output": proc.stdout + proc.stderr}


@pytest.fixture(scope="module")
def twenty_kills(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_chaos(tmp_path_factory.mktemp("chaos"), "--kills", "20")


def assert_promises_held(figures: dict[str, Any], kills: int) -> None:
    """What every chaos run must show, whatever the engine."""
    try:
        check_promises(figures, kills)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nbroken: {figures['broken_promises']}\n"
                             f"{figures['output'][-4000:]}") from None


def check_promises(figures: dict[str, Any], kills: int) -> None:
    """The figures' checks (``assert_promises_held`` adds the run's output on failure)."""
    k, r, v = figures["kills"], figures["readers"], figures["verification"]
    assert k["total"] == kills and k["writer_crashes"] == []
    assert k["writes_begun"] > 0 and k["mid_write"] is not None, "the store was never observed"
    assert r["served"] > 0, "readers served nothing, so they checked nothing"
    assert r["torn_or_wrong_served"] == 0 and r["errors"] == 0 and r["problems"] == []
    assert v["verified"] > 0
    assert (v["mismatched"], v["unknown"], v["not_served"]) == (0, 0, 0)
    assert v["verified"] == v["stored"] == figures["after_restart"]["entries"]
    left = figures["leftovers_after_restart"]
    assert left == dict.fromkeys(left, 0)
    assert figures["returncode"] == (1 if figures["broken_promises"] else 0)


@pytest.mark.slow
def test_twenty_kills_serve_nothing_torn_and_leave_nothing_after_restart(twenty_kills):
    assert_promises_held(twenty_kills, 20)
    assert "kills mid-write" in twenty_kills["output"]  # the table was printed


def test_kills_wait_for_a_stored_take_and_for_every_reader(tmp_path):
    """On a loaded machine a Piper writer can be killed before it ever stores a take, and
    readers with nothing stored check nothing: no kill is armed before both are there."""
    args = parse(["--writers", "2", "--readers", "1"])
    supervisor = Supervisor(args, TONE, tmp_path, tmp_path)
    board, now = supervisor.board, supervisor.started
    life = Life(slot=0, life=1, pid=0, aimed=True, deadline=None, give_up=now)
    supervisor.alive.append(life)
    board.set(0, Field.PHASE, Phase.PUT)  # inside its first put: an aimed kill would fire
    assert not supervisor.warmed_up(now + 1)
    board.set(1, Field.PUTS_DONE, 1)  # the other writer stored a take
    assert not supervisor.warmed_up(now + 1), "the reader is still loading its engine"
    board.set(board.reader_slot(0), Field.PHASE, Phase.CHOOSING)
    assert supervisor.warmed_up(now + 2)
    assert supervisor.warm_up_seconds == pytest.approx(2)
    assert life.give_up == now + 2 + AIM_PATIENCE["tone"]  # its patience counts from here
    stuck = Supervisor(args, TONE, tmp_path, tmp_path)
    assert not stuck.warmed_up(stuck.started + WARM_UP_PATIENCE["tone"] - 0.1)
    assert stuck.warmed_up(stuck.started + WARM_UP_PATIENCE["tone"])  # never waits forever


HOLD_A_KEY_LOCK = """
import sys
from voxcache import Cache, CachedEngine, SynthesisRequest, load_engine
cached = CachedEngine(load_engine("tone"), Cache(sys.argv[1]))
cached.synthesize(SynthesisRequest("Held until killed.", params={"delay": 60.0}))
"""


def test_a_restart_removes_the_lock_file_of_a_killed_renderer(tmp_path):
    root = tmp_path / "cache"
    renderer = forked.popen([sys.executable, "-c", HOLD_A_KEY_LOCK, str(root)], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not list(root.glob("locks/??/*.lock")) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        renderer.kill()
        renderer.wait()
    assert survey(root).key_lock_files == 1, "the renderer never took its key's lock"
    Cache(root).close()  # a restart: sweep and reconcile
    assert survey(root).key_lock_files == 0


KILLED_WHILE_OPENING = """
import os, signal, sys
from pathlib import Path
from voxcache import Cache
root = Path(sys.argv[1])
unlink = os.unlink

def die_before_removing_a_temp(path, *args, **kwargs):
    # SIGKILL at the exact instant a temp file in the root is about to be removed.
    if Path(path).parent == root and Path(path).name.startswith(".tmp-"):
        os.kill(os.getpid(), signal.SIGKILL)
    return unlink(path, *args, **kwargs)

os.unlink = die_before_removing_a_temp
Cache(root)
"""


def test_a_restart_removes_the_write_probe_of_a_killed_process(tmp_path):
    root = tmp_path / "cache"
    Cache(root).close()
    opener = forked.run([sys.executable, "-c", KILLED_WHILE_OPENING, str(root)], cwd=REPO)
    assert opener.returncode == -9
    assert survey(root).root_temp_files == 1, "the opener left no probe behind"
    Cache(root).close()
    assert survey(root).root_temp_files == 0


@pytest.mark.slow
@pytest.mark.piper
def test_piper_end_to_end(tmp_path):
    figures = run_chaos(tmp_path, "--kills", "4", "--engine", "piper", "--writers", "2",
                        "--readers", "1")
    assert_promises_held(figures, 4)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A folder with a good take, a wrong one (valid envelope, another request's samples)
    and one cut in half — what a broken publish or a broken check would leave."""
    root = tmp_path / "cache"
    cache = Cache(root)
    cached = CachedEngine(TONE.engine(), cache)
    for rid in (GOOD, TORN):
        cached.synthesize(TONE.request(rid))
    _, wrong_key = cached.resolve_and_key(TONE.request(WRONG))
    assert cache.put(audio_entry(wrong_key, fresh_render(TONE, cached, GOOD)))
    _, torn_key = cached.resolve_and_key(TONE.request(TORN))
    cache.close()
    path = survey(root).entries[torn_key]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return root


def test_the_audit_counts_a_wrong_take_and_never_serves_a_torn_file(planted):
    checked = verify(planted, TONE, [GOOD, WRONG, TORN])
    assert (checked.stored, checked.verified, checked.mismatched, checked.not_served) == (
        3, 1, 1, 1)
    assert len(checked.mismatched_keys) == 1
    assert len(list((planted / "quarantine").iterdir())) == 1  # the torn file, moved aside


READER = """
import json, os, sys, time
from pathlib import Path
from bench.chaos.harness import fork
from bench.chaos.board import Board, Field
from bench.chaos.workload import Workload, run_reader
root, logs, evidence, done = sys.argv[1:5]
board = Board(writers=1, readers=1)
board.set(0, Field.LIFE, 1)
board.set(0, Field.LAST_DONE, int(done))  # as if a writer had just stored it
pid = fork(run_reader, board, board.reader_slot(0), Workload("tone", 0.0), Path(root),
           Path(logs), Path(evidence), 7)
deadline = time.monotonic() + 30
while board.get(board.reader_slot(0), Field.TORN) < 5 and time.monotonic() < deadline:
    time.sleep(0.01)
board.stop()
_, status = os.waitpid(pid, 0)
print(json.dumps({f.name: board.get(board.reader_slot(0), f) for f in Field} | {"status": status}))
"""


def test_a_reader_counts_a_wrong_take_it_serves_as_torn(planted, tmp_path):
    evidence = tmp_path / "evidence"
    (tmp_path / "logs").mkdir()
    proc = forked.run([sys.executable, "-c", READER, str(planted), str(tmp_path / "logs"),
                       str(evidence), str(WRONG)], cwd=REPO, capture_output=True, text=True,
                      timeout=60)
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    assert counts["status"] == 0
    served_wrong = [json.loads(line) for line in (evidence / "torn.jsonl").read_text().splitlines()]
    assert counts["TORN"] >= 5 and counts["TORN"] == len(served_wrong)
    assert {record["request"] for record in served_wrong} == {WRONG}  # never the cut file
    figures = {"readers": {"torn_or_wrong_served": counts["TORN"], "errors": 0, "problems": []},
               "kills": {"writer_crashes": []}, "leftovers_after_restart": {},
               "verification": {"mismatched": 0, "unknown": 0}}
    assert broken_promises(figures) == ["a torn or wrong take was served"]
