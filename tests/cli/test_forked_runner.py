"""Forked ``voxcache`` processes (voxcache.testing.forked) are what ``subprocess`` starts:
the same exit codes, output and refusals, the given environment, folder, stdin and
descriptors, real pids that signals reach, and no child left behind by a test process that
is gone. What a fork cannot honour runs as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from voxcache.testing import forked
from voxcache.testing.servers import clean_env, free_port

CASES = {
    "a JSON answer": ["--engine", "tone", "explain", "Hello there", "--json"],
    "a refused engine": ["--engine", "nope", "explain", "Hello"],
    "argparse's refusal": ["--engine", "tone", "explain", "Hello", "--speed", "nope"],
    "a config it cannot read": ["--engine", "tone", "--config", "/dev/null/x", "stats"],
}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_a_fork_answers_what_the_process_answers(tmp_path: Path, argv: list[str]) -> None:
    cmd = [sys.executable, "-m", "voxcache", "--cache-dir", str(tmp_path / "cache"), *argv]
    env = {**clean_env(), "COLUMNS": "100"}
    process = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    fork = forked.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert (fork.returncode, fork.stdout, fork.stderr) == (
        process.returncode, process.stdout, process.stderr)


def test_the_environment_and_folder_are_the_given_ones(tmp_path: Path) -> None:
    given = tmp_path / "given"
    (tmp_path / "here").mkdir()
    done = forked.run([sys.executable, "-m", "voxcache.cli", "--engine", "tone", "synth",
                       "Said in the given folder.", "-o", "out.wav", "--json"],
                      capture_output=True, text=True, timeout=60, cwd=tmp_path / "here",
                      env=clean_env(VOXCACHE_DIR=str(given)))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "here" / "out.wav").stat().st_size > 44  # written in the given folder
    listed = forked.run([sys.executable, "-m", "voxcache", "ls", "--json"], capture_output=True,
                        text=True, timeout=60, env=clean_env(VOXCACHE_DIR=str(given)))
    assert len(json.loads(listed.stdout)) == 1  # the entry is in the folder the env named
    assert "VOXCACHE_DIR" not in os.environ


def _serve(cache: Path, port: int, **kwargs: object) -> forked.ForkedProcess:
    process = forked.popen([sys.executable, "-m", "voxcache", "--cache-dir", str(cache),
                            "--engine", "tone", "serve", "--port", str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=clean_env(), **kwargs)
    assert isinstance(process, forked.ForkedProcess)
    _ready(process, port)
    return process


def _ready(process: forked.ForkedProcess | subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2):
                return
        except OSError:
            assert time.monotonic() < deadline, "not ready"
            time.sleep(0.05)


def test_signals_reach_the_fork_and_its_exit_is_the_process_exit(tmp_path: Path) -> None:
    real = subprocess.Popen([sys.executable, "-m", "voxcache", "--cache-dir", str(tmp_path),
                             "--engine", "tone", "serve", "--port", str(port := free_port())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            process = _serve(tmp_path / "cache", free_port())
            assert process.pid != os.getpid()
            assert Path(f"/proc/{process.pid}").exists()
            with pytest.raises(subprocess.TimeoutExpired):
                process.wait(0.2)
            process.send_signal(sig)
            code = process.wait(30)
            assert process.poll() == code == process.returncode
            if sig == signal.SIGKILL:
                assert code == -9
                continue
            assert "serving tone" in process.stdout.read()  # its output, to the end
            _ready(real, port)
            real.send_signal(sig)
            assert code == real.wait(30)  # uvicorn raises SIGTERM again once it has stopped
            process.kill()  # reaped: its pid is not signalled again
    finally:
        real.kill()
        real.wait(30)


def test_a_new_session_is_its_own_process_group(tmp_path: Path) -> None:
    process = _serve(tmp_path / "cache", free_port(), start_new_session=True)
    assert os.getpgid(process.pid) == process.pid != os.getpgid(0)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(30) == -9


def test_what_a_fork_cannot_honour_is_a_subprocess(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "voxcache", "--version"]
    with forked.popen(cmd, stdout=subprocess.DEVNULL) as p:
        assert isinstance(p, forked.ForkedProcess)
    for other in ([sys.executable, "-X", "importtime", "-m", "voxcache", "--version"],
                  [sys.executable, "-I", "-c", "print(1)"], [sys.executable, "-m", "pip"],
                  ["/bin/echo", sys.executable]):
        with forked.popen(other, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as p:
            assert isinstance(p, subprocess.Popen)
    with forked.popen(cmd, stdout=subprocess.DEVNULL, preexec_fn=os.getpid) as p:
        assert isinstance(p, subprocess.Popen)
    interpreter = clean_env(PYTHONPATH=str(tmp_path))  # read as the interpreter starts
    with forked.popen(cmd, stdout=subprocess.DEVNULL, env=interpreter) as p:
        assert isinstance(p, subprocess.Popen)


SHOW = "import json, sys; print(json.dumps([__name__, sys.argv, sys.path[0]]))"


def test_code_and_scripts_run_as_the_interpreter_runs_them(tmp_path: Path) -> None:
    """``-c CODE`` and ``FILE.py`` see the argv, ``sys.path[0]`` and ``__name__`` a process
    started by the interpreter sees, and import what sits beside the script."""
    script = tmp_path / "tool" / "show.py"
    script.parent.mkdir()
    (script.parent / "beside.py").write_text("WHERE = 'beside'\n")
    script.write_text(SHOW + "\nimport beside; print(beside.WHERE)\n")
    for cmd in ([sys.executable, "-c", SHOW, "a", "b c"], [sys.executable, str(script), "x"],
                [sys.executable, "-m", "voxcache", "--version"]):
        real = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        fork = forked.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
        assert isinstance(fork, forked.ForkedProcess)
        out, err = fork.communicate(60)
        assert (fork.returncode, out, err) == (real.returncode, real.stdout, real.stderr)
    failing = [sys.executable, "-c", "import sys; print('out'); sys.exit('it failed')"]
    real = subprocess.run(failing, capture_output=True, text=True, timeout=60)
    fork = forked.run(failing, capture_output=True, text=True, timeout=60)
    assert (fork.returncode, fork.stdout, fork.stderr) == (1, "out\n", "it failed\n") == (
        real.returncode, real.stdout, real.stderr)
    raising = [sys.executable, "-c", "import json\njson.loads('{')"]
    real = subprocess.run(raising, capture_output=True, text=True, timeout=60)
    fork = forked.run(raising, capture_output=True, text=True, timeout=60)
    assert "JSONDecodeError" in real.stderr
    assert (fork.returncode, fork.stdout, fork.stderr) == (
        real.returncode, real.stdout, real.stderr)


CLIENT = textwrap.dedent("""
    import os, subprocess, sys
    from voxcache.testing import forked
    p = forked.popen([sys.executable, "-m", "voxcache", "--cache-dir", sys.argv[1], "--engine",
                      "tone", "serve", "--port", sys.argv[2]], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    print(p.pid, forked._ZYGOTE._process.pid, forked._ZYGOTE._path, flush=True)
    os._exit(0)  # gone without a word: a killed pytest worker
""")


def test_a_gone_client_takes_its_forks_and_its_zygote_with_it(tmp_path: Path) -> None:
    client = subprocess.run([sys.executable, "-c", CLIENT, str(tmp_path), str(free_port())],
                            capture_output=True, text=True, timeout=60, env=clean_env())
    fork, zygote, socket_path = client.stdout.split()
    deadline = time.monotonic() + 30
    for pid in (int(fork), int(zygote)):
        while _state(pid) not in ("gone", "Z"):
            assert time.monotonic() < deadline, f"{pid} outlived its client"
            time.sleep(0.05)
    assert not Path(socket_path).parent.exists()  # nothing left in /tmp


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
