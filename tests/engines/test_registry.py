"""Engines and upstream kinds are one registry mechanism (``voxcache.registry``): built-ins are
data beside their code, installed distributions add more through entry points, and a plugin
never takes over a built-in name."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from voxcache.engines import ENGINES, engine_class, load_engine
from voxcache.engines.tone import ToneEngine
from voxcache.errors import EngineLoadError, InvalidParameter
from voxcache.protocols.cosyvoice.upstream import CosyVoiceEngine
from voxcache.upstream import UPSTREAMS, load_upstream, parse_upstream, upstream_class


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution ``echo-upstream 0.3`` installed on ``sys.path``: an upstream kind
    ``echo``, one claiming the built-in ``cosyvoice``, an engine claiming ``tone``, and a kind
    whose class is not an upstream."""
    site = tmp_path / "site"
    dist = site / "echo_upstream-0.3.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-upstream\nVersion: 0.3\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""\
        [voxcache.upstreams]
        echo = echo_upstream:EchoEngine
        cosyvoice = echo_upstream:EchoEngine
        plain = echo_upstream:Plain
        [voxcache.engines]
        tone = echo_upstream:Plain
        """))
    (site / "echo_upstream.py").write_text(textwrap.dedent("""\
        from voxcache.upstream.base import UpstreamEngine

        class EchoEngine(UpstreamEngine):
            kind = "echo"

        class Plain:
            pass
        """))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_an_installed_upstream_kind_is_loaded_by_name(site: Path) -> None:
    assert "echo" in UPSTREAMS.names()
    assert parse_upstream("echo=http://127.0.0.1:9") == ("echo", "http://127.0.0.1:9")
    engine = load_upstream("echo=http://127.0.0.1:9", timeout=3)
    assert type(engine).__name__ == "EchoEngine" and engine.url == "http://127.0.0.1:9"
    entry = UPSTREAMS.find("echo")
    assert entry is not None and entry.distribution == "echo-upstream 0.3"
    with pytest.raises(InvalidParameter, match="unknown upstream kind 'kokoro'.*echo"):
        parse_upstream("kokoro=http://127.0.0.1:9")


def test_a_plugin_never_takes_over_a_built_in_name(site: Path) -> None:
    assert upstream_class("cosyvoice") is CosyVoiceEngine
    assert engine_class("tone") is ToneEngine
    assert UPSTREAMS.find("cosyvoice").target == UPSTREAMS.builtin["cosyvoice"]
    assert ENGINES.find("tone").distribution.startswith("voxcache ")


def test_a_registered_class_of_the_wrong_kind_is_a_clear_error(site: Path) -> None:
    with pytest.raises(EngineLoadError, match="upstream kind plugin 'plain' .*from "
                       "echo-upstream 0.3.* is not a voxcache.upstream.base.UpstreamEngine"):
        upstream_class("plain")


def test_every_built_in_is_data_that_loads() -> None:
    for registry in (ENGINES, UPSTREAMS):
        for name, target in registry.builtin.items():
            cls = registry.load(name, str)
            assert f"{cls.__module__}:{cls.__qualname__}" == target


def test_a_name_with_braces_is_refused_not_formatted() -> None:
    with pytest.raises(InvalidParameter, match=r"unknown engine '\{names\}\{0\}'"):
        load_engine("{names}{0}")
