"""The storing gate: whether a take just made may enter the cache, and why not.

One decision on the load-once path between "made" and "publish", in this order: text rules
(known before the render, so a stream's headers already say ``BYPASS``), distinct callers
(``admit_after``), then quality (and ``asr`` when on). A refused take is still served to
every waiter but written to no tier; a text-rule refusal leaves its text and key nowhere
(a short line's key could be reversed). Refusals are counted by reason; quality refusals
keep the key and reason (``refused``) for the operator. docs/operating/admission.md.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...audio import Audio
from ...cache import Cache
from ...resolved import ResolvedRequest
from . import quality
from .callers import Callers, caller_hash
from .settings import GateSettings, text_rules

if TYPE_CHECKING:
    from .classes import TextRules

log = logging.getLogger("voxcache.admit")

KEEP_REFUSED = 1000
"""Quality refusals kept (key, reason, when) for ``voxcache stats`` and the dashboard."""
ADMISSION = "admission"
QUALITY = "quality"


class Gate:
    """What may enter one cache, for one engine."""

    def __init__(self, settings: GateSettings, cache: Cache, *, speech: bool = True,
                 report: Callable[[str, BaseException, str], None] | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.speech = speech
        """Whether the engine renders speech (``Engine.speech``): the duration and pause
        checks apply only then."""
        self._report = report or cache.report_fault
        self._rules: dict[str, TextRules | None] = {
            "": text_rules(settings.admission.never_store),
            **{tenant: text_rules(admission.never_store)
               for tenant, admission in settings.tenants.items()}}
        self._callers: Callers | None = None
        if any(a.admit_after > 1 for a in (settings.admission, *settings.tenants.values())):
            self._callers = Callers(cache, self._report)
        self._transcriber: Any = None
        self._transcriber_lock = threading.Lock()
        if settings.quality.enabled and settings.quality.asr:
            self.transcriber()  # at start: a missing extra stops the process, not a request

    # -- before the render --------------------------------------------------------------
    def text_refusal(self, resolved: ResolvedRequest) -> str | None:
        """``admission:<class>`` when the tenant never stores text like this (no side
        effect: safe to ask on any path)."""
        rules = self._rules.get(resolved.tenant, self._rules[""])
        found = rules.match(resolved.text) if rules else None
        return None if found is None else f"{ADMISSION}:{found}"

    def caller_refusal(self, key: str, resolved: ResolvedRequest, caller: str | None
                       ) -> str | None:
        """``admission:admit_after`` while fewer than the tenant's ``admit_after`` distinct
        callers asked for ``key`` (this caller counted first)."""
        admission = self.settings.for_tenant(resolved.tenant)
        if admission.admit_after <= 1 or self._callers is None:
            return None
        who = None if caller is None else caller_hash(caller)
        heard = self._callers.count(key, who, admission.caller_window)
        return None if heard >= admission.admit_after else f"{ADMISSION}:admit_after"

    def before(self, key: str, resolved: ResolvedRequest, caller: str | None) -> str | None:
        """Why a take of ``key`` will not be stored, as far as is known before it exists."""
        return self.text_refusal(resolved) or self.caller_refusal(key, resolved, caller)

    def joined(self, key: str, resolved: ResolvedRequest, caller: str | None) -> None:
        """A caller shared another's render of ``key``: still a distinct caller of it."""
        if self._callers is None or caller is None or self.text_refusal(resolved):
            return
        admission = self.settings.for_tenant(resolved.tenant)
        if admission.admit_after > 1:
            self._callers.count(key, caller_hash(caller), admission.caller_window)

    # -- after the render ------------------------------------------------------------------
    def quality_refusal(self, audio: Audio, resolved: ResolvedRequest) -> str | None:
        """``quality:<reason>`` when ``audio`` is not fit to be the take of ``resolved``."""
        settings = self.settings.quality
        if not settings.enabled:
            return None
        started = time.perf_counter()
        found = quality.check(audio, resolved.text, resolved.speed, self.speech, settings)
        self.cache.count("gate_checks")
        self.cache.count("gate_check_us", int((time.perf_counter() - started) * 1e6))
        if found is None and settings.asr:
            found = self._asr(audio, resolved)
        return None if found is None else f"{QUALITY}:{found}"

    def _asr(self, audio: Audio, resolved: ResolvedRequest) -> str | None:
        from .asr import error_rate

        started = time.perf_counter()
        heard = self.transcriber().transcribe(audio, resolved.language)
        self.cache.count("gate_asr_checks")
        self.cache.count("gate_asr_ms", int((time.perf_counter() - started) * 1000))
        return "asr" if error_rate(resolved.text, heard) > self.settings.quality.asr_max_error \
            else None

    def transcriber(self) -> Any:
        """Whisper, loaded once (``asr.Transcriber``)."""
        with self._transcriber_lock:
            if self._transcriber is None:
                from .asr import Transcriber, weights_folder

                folder = self.settings.quality.asr_model
                self._transcriber = Transcriber(
                    weights_folder(self.cache.root) if not folder else _folder(folder))
            return self._transcriber

    # -- the outcome ------------------------------------------------------------------------
    def refused(self, key: str, resolved: ResolvedRequest, reason: str) -> None:
        """Count a refusal by reason; keep a quality refusal's key (never a text rule's)."""
        stage, _, why = reason.partition(":")
        self.cache.count(f"refused_{stage}_{why}")
        if stage != QUALITY:
            return
        try:
            with self.cache.index.transaction(0.2) as db:
                db.execute("INSERT INTO refused VALUES (?, ?, ?, ?, 1) ON CONFLICT(key) DO "
                           "UPDATE SET reason = excluded.reason, at = excluded.at, "
                           "times = times + 1", (key, why, resolved.tenant, time.time()))
                db.execute("DELETE FROM refused WHERE key IN (SELECT key FROM refused "
                           "ORDER BY at DESC LIMIT -1 OFFSET ?)", (KEEP_REFUSED,))
        except sqlite3.Error as exc:
            self._report("refusals", exc, "a refused take's key could not be recorded "
                         "(it is counted)")

    def stored(self, key: str, resolved: ResolvedRequest) -> None:
        """``key``'s take is stored: the callers counted for it are not needed any more."""
        if self._callers is not None and \
                self.settings.for_tenant(resolved.tenant).admit_after > 1:
            self._callers.forget(key)

    @property
    def counts_callers(self) -> bool:
        """Whether any tenant waits for distinct callers (``admit_after`` above 1)."""
        return self._callers is not None

    @property
    def retry(self) -> bool:
        """A take that fails the quality gate is rendered once more."""
        return self.settings.quality.enabled and self.settings.quality.on_fail == "retry"


def _folder(path: str) -> Any:
    from pathlib import Path

    return Path(path).expanduser()


def recent_refusals(cache: Cache, limit: int = 20, tenant: str | None = None
                    ) -> list[dict[str, Any]]:
    """The latest quality refusals (key, reason, tenant, when, how often), newest first;
    empty while the index cannot answer."""
    where, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
    try:
        rows = cache.index.query(
            f"SELECT key, reason, tenant, at, times FROM refused {where} ORDER BY at DESC "
            "LIMIT ?", (*args, limit), wait=0.2)
    except sqlite3.Error:
        return []
    return [{"key": k, "reason": f"{QUALITY}:{r}", "tenant": t, "at": a, "times": n}
            for k, r, t, a, n in rows]


def refusal_counts(counters: dict[str, int]) -> dict[str, int]:
    """``{"admission:digits": 3, "quality:runaway": 1, …}`` from the persisted counters."""
    found: dict[str, int] = {}
    for name, value in counters.items():
        if name.startswith("refused_"):
            stage, _, why = name[len("refused_"):].partition("_")
            found[f"{stage}:{why}"] = int(value)
    return found
