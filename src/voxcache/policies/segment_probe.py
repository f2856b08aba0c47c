"""The ``segments = "auto"`` probe: ask the engine to split two sentences of its own language.

An engine's splitter may only understand the language it speaks (a Chinese front end can
refuse Latin text, or see "One. Two." as one unknown word), so probing every engine in
English turned segment mode off for engines that split their own language perfectly. The
probe therefore speaks the engine's default language; the verdict, the language and the
text probed are logged, so an operator can see why segment mode is on or off.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..engine import Engine
from ..redact import redact

log = logging.getLogger("voxcache.segments")

SAMPLES: dict[str, str] = {
    "en": "One. Two.",
    "zh": "你好。谢谢。",
    "ja": "こんにちは。ありがとう。",
    "ko": "안녕하세요. 감사합니다.",
    "fr": "Bonjour. Merci.",
    "de": "Hallo. Danke.",
    "es": "Hola. Gracias.",
    "it": "Ciao. Grazie.",
    "pt": "Olá. Obrigado.",
    "nl": "Hallo. Bedankt.",
    "ru": "Привет. Спасибо.",
    "uk": "Привіт. Дякую.",
    "pl": "Cześć. Dziękuję.",
    "tr": "Merhaba. Teşekkürler.",
    "vi": "Xin chào. Cảm ơn.",
    "ar": "مرحبا. شكرا.",
    "hi": "नमस्ते। धन्यवाद।",
}
"""Two short sentences per language, by primary language subtag."""

_ALIASES = {"cmn": "zh", "yue": "zh", "jp": "ja", "jpn": "ja", "zho": "zh", "eng": "en"}

FALLBACK = "en"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the probe asked, what the engine answered, and whether segment mode is on."""

    on: bool
    language: str
    """The sample's language (English when none matches the engine's default)."""
    text: str
    reason: str


def sample_for(language: str) -> tuple[str, str]:
    """(sample language, text) for an engine language tag: the first subtag with a sample
    (``en-us`` → en, ``all_zh`` → zh), else English."""
    for subtag in language.strip().lower().replace("_", "-").split("-"):
        name = _ALIASES.get(subtag, subtag)
        if name in SAMPLES:
            return name, SAMPLES[name]
    return FALLBACK, SAMPLES[FALLBACK]


def probe(engine: Engine) -> Verdict:
    """Decide ``auto``: on where the engine splits two sentences of its default language
    and declares what its sentences depend on."""
    language, text = sample_for(engine.default_language)
    if not engine.segments_context_free and (
            type(engine).segment_context is Engine.segment_context):
        return Verdict(False, language, text, "its sentences depend on undeclared context")
    try:
        parts = engine.split_sentences(text)
    except Exception as exc:  # the engine's own splitter is engine code: off, and say why
        return Verdict(False, language, text,
                       f"its splitter failed on the probe: {redact(str(exc))}")
    if parts is None:
        return Verdict(False, language, text, "it declares no sentence split")
    return Verdict(True, language, text, f"it splits the probe into {len(parts)} part(s)")


def auto(engine: Engine) -> bool:
    """``probe`` the engine and log the verdict."""
    verdict = probe(engine)
    log.info("segment mode (auto) is %s for engine %r: its default language is %r, probed "
             "with %r (%s): %s", "on" if verdict.on else "off", engine.id,
             engine.default_language, verdict.text, verdict.language, verdict.reason)
    return verdict.on
