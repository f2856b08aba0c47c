"""What ``voxcache serve`` logs: a timestamp on every line, text or JSON, and why it stopped.

Real ``voxcache serve`` processes (the tone engine), stopped by the signals an operator
sends: SIGTERM (systemd, Kubernetes, ``kill``) and SIGINT (Ctrl-C).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from voxcache.testing import forked
from voxcache.testing.servers import clean_env, free_port

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+: ")


def serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
          before: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    clean = clean_env()
    proc = forked.popen(
        [sys.executable, "-m", "voxcache", "--cache-dir", str(tmp_path / "cache"), "--engine",
         "tone", *before, "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**clean, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "voxcache serve did not become ready"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str], sig: signal.Signals) -> list[str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    return err.splitlines()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_text_lines_have_timestamps_and_say_why_the_server_stopped(tmp_path: Path,
                                                                   sig: signal.Signals) -> None:
    proc, url = serve(tmp_path)
    spoken = httpx.post(f"{url}/v1/audio/speech", json={"input": "Hello."}, timeout=60)
    assert spoken.status_code == 200
    lines = stop(proc, sig)
    assert lines and all(STAMP.match(line) for line in lines), lines
    said = [line.split(": ", 1)[1] for line in lines]
    assert any(s.startswith("starting: {") for s in said)
    assert any(s.startswith("started: process") for s in said)
    assert any(s.startswith("method=POST path=/v1/audio/speech status=200") for s in said)
    assert f"stopping ({sig.name}): finishing renders, closing the cache" in said, said
    assert any(s.startswith(f"stopped ({sig.name}): process {proc.pid}") for s in said), said


@pytest.mark.parametrize("how", ["flag", "environment", "config"])
def test_json_lines_by_flag_environment_or_config(tmp_path: Path, how: str) -> None:
    config = tmp_path / "voxcache.toml"
    config.write_text('log_format = "json"\n')
    before, env = {"flag": (("--log-format", "json"), {}),
                   "environment": ((), {"VOXCACHE_LOG_FORMAT": "json"}),
                   "config": (("--config", str(config)), {})}[how]
    proc, url = serve(tmp_path, env=env, before=before)
    assert httpx.get(f"{url}/v1/stats").status_code == 200
    lines = stop(proc, signal.SIGTERM)
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(set(r) >= {"time", "level", "logger", "pid", "message"} for r in records)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"])
               for r in records)
    messages = [r["message"] for r in records]
    assert any(m.startswith("method=GET path=/v1/stats status=200") for m in messages)
    assert any(m.startswith("stopped (SIGTERM)") for m in messages), messages


def test_workers_log_alike_and_each_says_why_it_stopped(tmp_path: Path) -> None:
    proc, url = serve(tmp_path, "--workers", "2", before=("--log-format", "json"))
    lines = stop(proc, signal.SIGTERM)
    records = [json.loads(line) for line in lines]  # uvicorn's supervisor lines too
    stopped = {r["pid"] for r in records if r["message"].startswith("stopped (SIGTERM)")}
    assert len(stopped) == 2 and proc.pid not in stopped, records


def test_a_log_format_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    clean = clean_env()
    result = forked.run([sys.executable, "-m", "voxcache", "--cache-dir",
                         str(tmp_path / "c"), "--engine", "tone", "serve", "--port",
                         str(free_port())], capture_output=True, text=True, timeout=60,
                        env={**clean, "VOXCACHE_LOG_FORMAT": "xml"})
    assert result.returncode == 2
    assert "log_format must be one of text, json, got 'xml'" in result.stderr
    assert "Traceback" not in result.stderr
