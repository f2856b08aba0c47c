"""docs/operating/settings.md, written from the settings code: every setting, where it is spelt, its
default and what it means.

Each settings class documents each field in the docstring under it; this module reads
them from the source (``ast``), the defaults from the dataclasses and the environment
names from the loaders' rules, so the reference cannot drift from the code
(``tests/core/test_settings_doc.py`` fails when it would).

    python -m voxcache.cli.settings_doc > docs/operating/settings.md
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..policies.admit import AdmissionSettings, QualitySettings, SavingsSettings
from ..service.options import ServiceOptions
from ..service.packs import PackSettings
from ..service.sampler import DashboardSettings
from .output import human_size

SERVICE_ENV = "VOXCACHE_SERVICE_"
"""``service_options`` reads ``VOXCACHE_SERVICE_<NAME>`` for each ``[service]`` setting."""

SERVICE_TABLES = {
    "voice_aliases": "[voice_aliases] NAME = \"VOICE\"",
    "api_keys": "[tenants.NAME] api_keys = [\"KEY\", …]",
    "admin_keys": "[admin] api_keys = [\"KEY\", …]",
}
"""``ServiceOptions`` fields that come from tables of their own, not from ``[service]``."""

OTHER_ENVIRONMENT = {
    "VOXCACHE_CONFIG": "The TOML settings file, when ``--config`` is not given.",
    "VOXCACHE_PACKS_API_KEY": "The API key ``voxcache pack pull`` presents to the center "
                              "(an ``[admin]`` key there); kept out of the command line, "
                              "where other users of the machine could read it.",
}
"""Environment variables that are not a setting's other spelling."""


@dataclass(frozen=True, slots=True)
class Row:
    """One setting as the reference shows it."""

    owner: type
    name: str
    toml: str
    env: tuple[str, ...]
    default: str
    meaning: str


class Undocumented(Exception):
    """A settings field with no docstring under it."""


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal right under its annotation)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = after.value.value
    return docs


def rows() -> list[Row]:
    """Every setting, in the order of the reference."""
    found: list[Row] = []
    for field, meaning in _fields(Settings, skip={"extra"}):
        env = [f"VOXCACHE_{field.name.upper()}"]
        if field.name == "cache_dir":
            env.insert(0, "VOXCACHE_DIR")
        found.append(Row(Settings, field.name, field.name, tuple(env), _default(field),
                         meaning))
    for field, meaning in _fields(ServiceOptions):
        if field.name in SERVICE_TABLES:
            found.append(Row(ServiceOptions, field.name, SERVICE_TABLES[field.name], (),
                             _default(field), meaning))
        else:
            found.append(Row(ServiceOptions, field.name, f"[service] {field.name}",
                             (f"{SERVICE_ENV}{field.name.upper()}",), _default(field),
                             meaning))
    for field, meaning in _fields(DashboardSettings):
        found.append(Row(DashboardSettings, field.name, f"[dashboard] {field.name}",
                         (f"VOXCACHE_DASHBOARD_{field.name.upper()}",), _default(field),
                         meaning))
    for field, meaning in _fields(PackSettings):
        found.append(Row(PackSettings, field.name, f"[packs] {field.name}", (),
                         _default(field), meaning))
    for cls, table in GATE_TABLES.items():
        for field, meaning in _fields(cls):
            found.append(Row(cls, field.name, f"[{table}] {field.name}",
                             (f"VOXCACHE_{table.upper()}_{field.name.upper()}",),
                             _default(field), meaning))
    return found


GATE_TABLES = {AdmissionSettings: "admission", QualitySettings: "quality",
               SavingsSettings: "savings"}
"""The storing gate's and the ledger's tables (``policies.admit.settings``)."""


def _fields(cls: type, skip: frozenset[str] | set[str] = frozenset()
            ) -> list[tuple[dataclasses.Field[Any], str]]:
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in skip
               and not docs.get(f.name, "").strip()]
    if missing:
        verb = "has" if len(missing) == 1 else "have"
        raise Undocumented(f"{cls.__name__}: {', '.join(missing)} {verb} no docstring; write "
                           "what it means under the field")
    return [(f, _prose(docs[f.name])) for f in dataclasses.fields(cls) if f.name not in skip]


def _default(field: dataclasses.Field[Any]) -> str:
    if field.name == "cache_dir":
        return "`$XDG_CACHE_HOME/voxcache`, else `~/.cache/voxcache`"
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    return _shown(field.name, value)


def _shown(name: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and _is_size(name):
        return f"{human_size(value)} (`{value}`)"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, tuple | list | frozenset):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def _is_size(name: str) -> bool:
    return name.endswith("_bytes") or name in ("memory_budget", "shared_write_queue")


def _prose(doc: str) -> str:
    """A docstring as one Markdown table cell: ``code`` → `code`, one line, pipes escaped."""
    text = re.sub(r"``(.+?)``", r"`\1`", " ".join(doc.split()))
    return text.replace("|", "\\|")


HEADER = """# Settings reference

<!-- Written by `python -m voxcache.cli.settings_doc > docs/operating/settings.md` from the settings
code (each field's docstring, its default, the loaders' environment names); do not edit by
hand: tests/core/test_settings_doc.py fails when this file is stale or a setting has no
docstring. -->

Every setting is read from, lowest precedence first: its default, the TOML file
(`--config FILE`, or `VOXCACHE_CONFIG`), the environment, then the command line
(`--cache-dir`, `--engine`, `--log-format`, `serve --upstream …`). Sizes take units
(`512MB`, `5GiB`, or a plain byte count: `MB` is 10^6 bytes, `MiB` 2^20), durations are
seconds, switches are `true`/`false` in TOML and `1`/`0` in the environment. A name a
table does not know is refused at start with what it takes.

```toml
# voxcache.toml: the top level, then tables
cache_dir = "/var/cache/voxcache"
tiers = ["memory", "disk", "redis://redis:6379/0", "s3://voxcache/takes"]
log_format = "json"

[service]
render_queue = 32

[tenants.acme]
api_keys = ["a-key-of-8-characters-or-more"]
```
"""

SECTIONS = (
    (Settings, "## Top level",
     "What every command and the service run with (`voxcache.config.Settings`)."),
    (ServiceOptions, "## The service: `[service]`, `[tenants.*]`, `[admin]`, "
     "`[voice_aliases]`",
     "Limits and switches of `voxcache serve` (`voxcache.service.options.ServiceOptions`); "
     "API keys and voice names come from tables of their own and have no environment "
     "spelling."),
    (DashboardSettings, "## The dashboard: `[dashboard]`",
     "How often each worker samples its figures and how much history the page shows "
     "(`voxcache.service.sampler.DashboardSettings`)."),
    (PackSettings, "## Packs: `[packs]`",
     "Publishing signed packs (`voxcache.service.packs.PackSettings`; docs/operating/edge.md)."),
    (AdmissionSettings, "## What may be stored: `[admission]`, `[tenants.*.admission]`",
     "Text classes never stored and distinct callers before a take is stored "
     "(`voxcache.policies.admit.settings.AdmissionSettings`; "
     "docs/operating/admission.md). A tenant's "
     "`[tenants.NAME.admission]` table takes the same names (no environment spelling) and "
     "replaces, for that tenant, each setting it names."),
    (QualitySettings, "## The quality gate: `[quality]`",
     "What a rendered take must be before it is stored "
     "(`voxcache.policies.admit.settings.QualitySettings`; docs/operating/admission.md)."),
    (SavingsSettings, "## The savings ledger: `[savings]`",
     "What a take served from the cache is worth "
     "(`voxcache.policies.admit.settings.SavingsSettings`; docs/operating/admission.md)."),
)


def render() -> str:
    """The whole of docs/operating/settings.md."""
    by_owner: dict[type, list[Row]] = {}
    for row in rows():
        by_owner.setdefault(row.owner, []).append(row)
    parts = [HEADER]
    for owner, title, intro in SECTIONS:
        parts += [f"\n{title}\n\n{intro}\n\n| TOML | environment | default | meaning |\n"
                  "|---|---|---|---|\n"]
        for row in by_owner.pop(owner):
            env = ", ".join(f"`{e}`" for e in row.env) or "—"
            parts.append(f"| `{row.toml}` | {env} | {row.default} | {row.meaning} |\n")
    assert not by_owner, f"settings classes with no section: {list(by_owner)}"
    parts.append("\n## Other environment variables\n\n| variable | meaning |\n|---|---|\n")
    for name, meaning in OTHER_ENVIRONMENT.items():
        parts.append(f"| `{name}` | {_prose(meaning)} |\n")
    parts.append("\nThe S3 tier reads the standard AWS variables (`AWS_ENDPOINT_URL`, "
                 "`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`) through boto3 "
                 "(docs/operating/cluster.md); `upstream_options` are per upstream kind "
                 "(docs/operating/gateway.md, docs/operating/edge.md).\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
