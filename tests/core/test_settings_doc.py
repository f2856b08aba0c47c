"""docs/operating/settings.md is the settings code, written out: no setting undocumented, no stale
line, no environment name that the loaders do not read.

To refresh it after changing a setting: ``python -m voxcache.cli.settings_doc >
docs/operating/settings.md``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from voxcache.cli import settings_doc
from voxcache.cli.settings_doc import Row, Undocumented, field_docs, render, rows
from voxcache.config import Settings, load_settings
from voxcache.policies.admit import (
    AdmissionSettings,
    QualitySettings,
    SavingsSettings,
    gate_settings,
)
from voxcache.service.options import ServiceOptions, service_options
from voxcache.service.sampler import DashboardSettings, dashboard_settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operating" / "settings.md"

SAMPLES = {
    "cache_dir": "/srv/voxcache-elsewhere", "engine": "tone", "log_format": "json",
    "tiers": "memory,disk,redis://127.0.0.1:1/0", "segments": "off", "seed_policy": "bypass",
    "model_policy": "stale-while-revalidate", "reference_roots": "/srv/a:/srv/b",
    "upstream": "openai=http://127.0.0.1:9", "upstream_revision": "r2",
    "upstream_options": '{"model": "tts-2"}', "engine_options": '{"threads": 1}',
    "never_store": "digits,re:[A-Z]{2}", "caller": "header:X-Session", "on_fail": "retry",
    "asr_model": "/srv/whisper", "price_per_million_chars": "15",
    "price_per_engine_second": "0.0004", "currency": "EUR",
}
"""An environment value for each setting that is not a number or a switch."""


def test_the_reference_is_what_the_code_writes() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/operating/settings.md is stale: run "
        "python -m voxcache.cli.settings_doc > docs/operating/settings.md")


def test_every_setting_is_in_the_reference() -> None:
    documented = {(row.owner, row.name) for row in rows()}
    for cls in (Settings, ServiceOptions, DashboardSettings, settings_doc.PackSettings):
        for field in dataclasses.fields(cls):
            if field.name != "extra":
                assert (cls, field.name) in documented, f"{cls.__name__}.{field.name}"
    text = DOC.read_text(encoding="utf-8")
    for name in ("max_text_chars", "piper_threads", "log_format", "shared_write_queue"):
        assert f"| `{name}` |" in text


def test_a_setting_without_a_docstring_fails_the_reference(monkeypatch) -> None:
    @dataclasses.dataclass
    class Table:
        documented: int = 1
        """What it means."""
        forgotten: int = 2

    assert field_docs(Table) == {"documented": "What it means."}
    monkeypatch.setattr(settings_doc, "PackSettings", Table)  # one more class to document
    with pytest.raises(Undocumented, match="Table: forgotten has no docstring"):
        rows()


def test_every_environment_variable_the_code_names_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    named = set()
    for path in (ROOT / "src" / "voxcache").rglob("*.py"):
        named |= set(re.findall(r"VOXCACHE_[A-Z][A-Z_]*", path.read_text(encoding="utf-8")))
    assert named  # the scan found the code's names
    for name in sorted(named):
        if name.endswith("_"):  # a prefix the code completes (VOXCACHE_SERVICE_<NAME>)
            assert f"`{name}" in text, name
        else:
            assert f"`{name}`" in text, f"{name} is read by the code but not in settings.md"


def _gate() -> object:
    import os

    return gate_settings({}, os.environ)


def _sample(row: Row, default: object) -> str:
    if row.name in SAMPLES:
        return SAMPLES[row.name]
    if isinstance(default, bool):
        return "0" if default else "1"
    if isinstance(default, int | float) and not isinstance(default, bool):
        return str(default * 2)
    if default is None:
        return "7"
    raise AssertionError(f"give {row.name} a sample value in SAMPLES")


@pytest.mark.parametrize("row", [r for r in rows() if r.env], ids=lambda r: r.toml)
def test_each_documented_environment_name_is_read(row: Row, monkeypatch) -> None:
    """Set each variable the reference names and see the setting change."""
    loaders = {Settings: lambda: load_settings(),
               ServiceOptions: lambda: service_options(Settings()),
               DashboardSettings: lambda: dashboard_settings(Settings()),
               AdmissionSettings: lambda: _gate().admission,
               QualitySettings: lambda: _gate().quality,
               SavingsSettings: lambda: _gate().savings}
    for name in [r for rs in rows() for r in rs.env]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("VOXCACHE_CONFIG", raising=False)
    load = loaders[row.owner]
    default = getattr(load(), row.name)
    for env in row.env:
        monkeypatch.setenv(env, _sample(row, default))
        assert getattr(load(), row.name) != default, env
        monkeypatch.delenv(env)
