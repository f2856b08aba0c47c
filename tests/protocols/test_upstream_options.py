"""Every upstream option docs/operating/gateway.md documents is accepted, by every kind it
names — and a kind takes no option the table leaves out.

``upstream_options = {timeout = 20}``, as docs/operating/edge.md wrote it, stopped ``serve``
at start with a ``TypeError`` (the service passed ``timeout`` itself, from ``upstream_timeout``).
Each kind is loaded the way ``serve`` loads it (``runtime.load_configured_engine``) against
a real server that speaks its protocol (the hostile stand-in's well-behaved side).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.packs.nodes import cli, serve, write_config
from voxcache.config import Settings
from voxcache.engine import accepted_options
from voxcache.errors import InvalidParameter
from voxcache.runtime import load_configured_engine
from voxcache.upstream import UPSTREAMS, load_upstream, upstream_class

from .servers import hostile_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "operating" / "gateway.md"
INTERNAL = {"references"}
"""Set by the service from ``reference_roots``, never by the operator."""
REFUSED = {("voxcache", "revision")}
"""Taken by the class but refused by design (an edge keys with its center's revision)."""


def documented() -> dict[str, set[str]]:
    """option → the kinds docs/operating/gateway.md's table says take it."""
    text = DOC.read_text()
    table = text[text.index("### Upstream options"):].split("\n\n")[2]
    options: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        name = cells[0].strip("`")
        options[name] = set(UPSTREAMS.names()) if cells[1] == "every kind" else set(
            re.findall(r"`([a-z-]+)`", cells[1]))
    return options


def sample(option: str, tmp_path: Path) -> object:
    """A value of each documented option, as TOML or JSON would give it."""
    ref_dir = tmp_path / "staged"
    ref_dir.mkdir(exist_ok=True)
    return {"timeout": 20, "retries": 0, "headers": {"X-Team": "tts"},
            "max_answer_bytes": 10_000_000, "revision": "rev-7",
            "ref_root_upstream": "/data/voices", "ref_dir": str(ref_dir),
            "ref_dir_upstream": "/data/staged", "sample_rate": 22050,
            "voices": ["alto", "bass"], "default_voice": "bass", "model": "tts-1-hd",
            "api_key": "sk-test-key", "instructions": True, "fallback": "tone",
            "connect_timeout": 1.5}[option]


def test_the_table_lists_every_option_each_kind_takes() -> None:
    table = documented()
    for kind in UPSTREAMS.names():
        engine_class = upstream_class(kind)
        takes = accepted_options(engine_class) - INTERNAL - {"url"}
        listed = {option for option, kinds in table.items() if kind in kinds}
        assert takes - listed - {o for k, o in REFUSED if k == kind} == set(), kind
        assert listed - takes == set(), kind


@pytest.mark.parametrize("kind", UPSTREAMS.names())
def test_every_documented_option_is_accepted(tmp_path: Path, kind: str) -> None:
    options = [option for option, kinds in documented().items() if kind in kinds]
    roots = [tmp_path / "refs"]  # gpt-sovits: ref_root_upstream names one folder per root
    roots[0].mkdir()
    with hostile_server(tmp_path / "hostile") as upstream:
        for option in options:
            value = sample(option, tmp_path)
            settings = Settings(cache_dir=tmp_path / "cache", upstream=f"{kind}={upstream.url}",
                                upstream_options={option: value}, reference_roots=roots)
            engine = load_configured_engine(settings)
            if option == "timeout":
                assert engine.client.timeout == 20
            if option == "max_answer_bytes":
                assert engine.client.max_answer_bytes == 10_000_000
        everything = {option: sample(option, tmp_path) for option in options}
        if kind == "voxcache":
            everything.pop("fallback")  # loads a second engine: once above is enough
        load_configured_engine(Settings(cache_dir=tmp_path / "cache",
                                        upstream=f"{kind}={upstream.url}",
                                        upstream_options=everything, reference_roots=roots))


def test_headers_reach_the_upstream(tmp_path: Path) -> None:
    with hostile_server(tmp_path / "hostile") as upstream:
        edge = load_upstream(f"voxcache={upstream.url}", headers={"X-Team": "tts"})
        openai = load_upstream(f"openai={upstream.url}", headers={"X-Team": "tts"},
                               api_key="sk-test-key")
        seen = upstream.log()
    assert edge.center_tenant == "default" and openai.voices
    assert {call["path"]: call["headers"].get("x-team") for call in seen} == {
        "/v1/packs/identity": "tts", "/v1/audio/voices": "tts"}
    [voices] = [call for call in seen if call["path"] == "/v1/audio/voices"]
    assert voices["headers"]["authorization"] == "Bearer sk-test-key"


@pytest.mark.parametrize(("option", "value", "message"), [
    ("timeout", "soon", "timeout must be a positive number of seconds"),
    ("timeout", 0, "timeout must be a positive number of seconds"),
    ("retries", -1, "retries must be a whole number"),
    ("max_answer_bytes", 0, "max_answer_bytes must be a whole number of at least 1"),
    ("headers", ["X-Team"], "headers must be a table"),
])
def test_a_bad_option_value_says_what_to_fix(tmp_path: Path, option: str, value: object,
                                             message: str) -> None:
    with pytest.raises(InvalidParameter, match=message):
        load_upstream("cosyvoice=http://127.0.0.1:9", **{option: value})


def test_serve_takes_the_timeout_option_the_edge_docs_show(tmp_path: Path) -> None:
    """docs/operating/edge.md's ``upstream_options = {timeout = 20}`` on a real ``voxcache serve``
    (it crashed with a TypeError before); the same with a disagreeing ``upstream_timeout`` is
    refused with exit code 2, naming both."""
    good = write_config(tmp_path / "good.toml", "upstream_options = {timeout = 20}\n")
    both = write_config(tmp_path / "both.toml",
                        "upstream_timeout = 5\nupstream_options = {timeout = 20}\n")
    with hostile_server(tmp_path / "hostile") as upstream:
        for kind in ("voxcache", "openai"):
            with serve(tmp_path / f"cache-{kind}", "--upstream", f"{kind}={upstream.url}",
                       config=good) as node:
                assert httpx.get(f"{node.url}/v1/engine", timeout=10).status_code == 200
        refused = cli("--cache-dir", str(tmp_path / "cache-both"), "--config", str(both),
                      "serve", "--port", "9", "--upstream", f"openai={upstream.url}",
                      check=False)
    assert refused.returncode == 2, refused.stderr
    assert "upstream_timeout = 5.0 and upstream_options timeout = 20 disagree" in \
        refused.stderr
    assert "Traceback" not in refused.stderr
