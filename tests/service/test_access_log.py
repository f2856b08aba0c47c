"""The access log of ``voxcache serve`` (one line per request, nothing secret in it), its
off switches, and ``warm --server`` skipping what the service's engine does not speak."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from urllib.parse import quote

import httpx
import pytest

from voxcache.config import Settings
from voxcache.service.options import service_options
from voxcache.testing import forked

LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "  # a UTC timestamp on every line
                  r"INFO voxcache\.access: method=(\S+) path=(\S+) status=(\S+) cache=(\S+) "
                  r"tier=(\S+) key=(\S+) ms=\d+\.\d")
API_KEY = "acme-secret-key-0042"
SECRET_TEXT = "Ninety nine red balloons drift by."


def stop_and_read(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=30)
    return output


def access_lines(output: str) -> list[tuple[str, ...]]:
    """Every access line, parsed; a line that mentions the logger but does not parse fails."""
    found = []
    for line in output.splitlines():
        if "voxcache.access" in line or "method=" in line:
            match = LINE.fullmatch(line)
            assert match, f"not one whole access line: {line!r}"
            found.append(match.groups())
    return found


def test_one_line_per_request_with_key_prefix_and_nothing_secret(tmp_path, serve_proc) -> None:
    config = tmp_path / "voxcache.toml"
    config.write_text(f'[tenants.acme]\napi_keys = ["{API_KEY}"]\n')
    auth = {"Authorization": f"Bearer {API_KEY}"}
    forged = "/v1/audio/x\nINFO voxcache.access: method=GET path=/forged status=200"
    with serve_proc(tmp_path / "cache", config=config) as (url, proc):
        miss = httpx.post(f"{url}/v1/synthesize", json={"text": SECRET_TEXT}, headers=auth,
                          timeout=30)
        hit = httpx.post(f"{url}/v1/synthesize", json={"text": SECRET_TEXT}, headers=auth,
                         timeout=30)
        key = miss.headers["x-cache-key"]
        stored = httpx.get(f"{url}/v1/audio/{key}", headers=auth, timeout=30)  # the fast path
        health = httpx.get(f"{url}/healthz?token=query-secret-77", timeout=10)
        injected = httpx.get(url + quote(forged), headers=auth, timeout=10)
        tts = httpx.get(f"{url}/tts", params={"text": "Query text secret.", "text_lang": "en"},
                        headers=auth, timeout=30)
        output = stop_and_read(proc)
    assert (miss.status_code, hit.status_code, stored.status_code) == (200, 200, 200)
    assert (health.status_code, injected.status_code) == (200, 404)
    lines = access_lines(output)
    assert ("POST", "/v1/synthesize", "200", "MISS", "engine", key[:12]) in lines
    assert ("POST", "/v1/synthesize", "200", "HIT", hit.headers["x-cache-tier"],
            key[:12]) in lines
    assert ("GET", f"/v1/audio/{key}", "200", "HIT", "memory", key[:12]) in lines
    assert ("GET", "/healthz", "200", "-", "-", "-") in lines
    assert ("GET", "/tts", str(tts.status_code)) in [line[:3] for line in lines]
    (forged_line,) = [line for line in lines if line[1].startswith("/v1/audio/x")]
    assert forged_line[2] == "404" and "%0A" in forged_line[1]
    assert not any(line[1] == "/forged" for line in lines)  # no line a client wrote
    for secret in (SECRET_TEXT, "Ninety", API_KEY, "query-secret", "Query text"):
        assert secret not in output


def test_the_access_log_turns_off_by_flag_and_by_config(tmp_path, serve_proc) -> None:
    quiet = tmp_path / "quiet.toml"
    quiet.write_text("[service]\naccess_log = false\n")
    for args, config in ((("--no-access-log",), None), ((), quiet)):
        with serve_proc(tmp_path / "cache", *args, config=config) as (url, proc):
            answer = httpx.post(f"{url}/v1/synthesize", json={"text": "Quiet please."},
                                timeout=30)
            output = stop_and_read(proc)
        assert answer.status_code == 200
        assert "voxcache.access" not in output and "method=" not in output, args
        assert "serving tone" in output  # the server did log, just not per request


def test_the_environment_switch(monkeypatch) -> None:
    assert service_options(Settings()).access_log is True
    for value, expected in (("0", False), ("false", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("VOXCACHE_SERVICE_ACCESS_LOG", value)
        assert service_options(Settings()).access_log is expected


@pytest.mark.slow
def test_worker_processes_log_too_and_the_flag_reaches_them(tmp_path, serve_proc) -> None:
    for args, expect_lines in ((("--workers", "2"), True),
                               (("--workers", "2", "--no-access-log"), False)):
        with serve_proc(tmp_path / "cache", *args) as (url, proc):
            for i in range(4):
                assert httpx.post(f"{url}/v1/synthesize", json={"text": f"Worker {i}."},
                                  timeout=30).status_code == 200
            output = stop_and_read(proc)
        posts = [line for line in access_lines(output) if line[0] == "POST"]
        assert len(posts) == (4 if expect_lines else 0), output


def test_warm_through_a_server_skips_languages_it_does_not_speak(tmp_path, serve_proc) -> None:
    phrases = tmp_path / "phrases.json"
    phrases.write_text(json.dumps({"phrases": [
        {"text": "Welcome."}, {"text": "欢迎光临。", "language": "zh"},
        {"text": "Bienvenue.", "language": "fr"}, {"text": "Qapla'.", "language": "tlh"},
        {"text": "Goodbye.", "language": "en"}]}))
    with serve_proc(tmp_path / "cache") as (url, proc):
        result = forked.run([sys.executable, "-m", "voxcache.cli", "warm", str(phrases),
                             "--server", url, "--json"], capture_output=True, text=True,
                            timeout=120)
        output = stop_and_read(proc)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["rendered"], summary["skipped"], summary["failed"]) == (3, 2, [])
    assert summary["skipped_languages"] == {"fr": 1, "tlh": 1}  # the tone engine speaks zh
    sent = [line for line in access_lines(output) if line[:2] == ("POST", "/v1/synthesize")]
    assert len(sent) == 3  # skipped lines never reached the server
