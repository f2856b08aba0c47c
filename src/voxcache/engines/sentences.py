"""A sentence splitter for engines that have none of their own, in every script.

Segment mode stitches stored parts, so the split must be exact: the parts are slices of the
text in order, only whitespace between them dropped, and splitting a part again gives that
part. Where a rule is unsure it does not split: one sentence too few costs a little reuse,
one too many puts a pause in a word ("U.S. | Army"). docs/internals/segments.md, "Sentences
in every script", has the rules and why this is a rule set rather than pysbd or sentencex.
"""

from __future__ import annotations

import bisect
import re

_CJK_STOPS = "。！？｡．"
"""Ideographic, full-width and half-width stops: they end a sentence with no space after."""

_PAIRS = {"(": ")", "[": "]", "（": "）", "［": "］", "「": "」", "『": "』", "｢": "｣",
          "【": "】", "〔": "〕", "〈": "〉", "《": "》", "〖": "〗", "“": "”"}
"""Brackets and directional quotes: a stop inside a closed pair never ends the sentence
around it (「止まれ！」と言った). ASCII quotes and ’ are not here: they do not say which
way they face (’ is also the apostrophe)."""

_OPENER = {close: open_ for open_, close in _PAIRS.items()}
_BRACKET = re.compile(f"[{re.escape(''.join(_PAIRS) + ''.join(_OPENER))}]")
_CLOSERS = "".join(_PAIRS.values()) + "\"'’»"

_RUN = re.compile(
    # a run of stops: Latin, ellipses, CJK, danda, Arabic, Urdu, Ethiopic, Armenian;
    # "．" only where it is not a decimal point between digits (３．１４)
    r"(?:[.!?…‼⁇⁈⁉。！？｡।॥؟۔።։]|(?<![0-9０-９])．|．(?![0-9０-９]))+"
    rf"(?P<closers>[{re.escape(_CLOSERS)}]*)")

_SPACES = re.compile(r"\s*")

_TITLES = frozenset((
    "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "jr", "sr", "rev", "fr", "hon",
    "gen", "col", "lt", "capt", "sgt", "gov", "sen", "rep", "pres", "messrs", "mme",
    "mlle", "vs", "cf", "viz", "approx"))
"""Abbreviations that come before a name or a term, so never end a sentence. Words such as
"etc." or "Inc." often do end one and are not here; "No. 5" and "Fig. 3" are kept whole by
the digit rule instead."""


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences: each part is a slice of ``text``, in order, and only
    the whitespace between parts is left out."""
    pairs = _Pairs(text)
    parts: list[str] = []
    start = 0
    for run in _RUN.finditer(text):
        end = run.end()
        if end < len(text) and not pairs.separate(end) and _ends_sentence(text, run):
            _append(parts, text[start:end])
            start = end
    _append(parts, text[start:])
    return parts


def _append(parts: list[str], piece: str) -> None:
    piece = piece.strip()
    if piece:
        parts.append(piece)


def _ends_sentence(text: str, run: re.Match[str]) -> bool:
    """Whether the stops of ``run`` (and the closers after them) end a sentence."""
    after = run.end()
    stops = text[run.start():run.start("closers")]
    cjk = any(c in _CJK_STOPS for c in stops)
    if text[after].isspace():
        visible = _SPACES.match(text, after).end()  # type: ignore[union-attr]
        if visible == len(text):
            return False
        following = text[visible]
        if cjk:
            return True
        if stops == "." and _abbreviation(text, run.start()):
            return False
        # "e.g. hammers", "No. 5", "Wait... what?": a lower-case word or a digit goes on
        return not (following.islower() or following.isdigit())
    following = text[after]
    if cjk:
        # 「おはよう。」「はい。」 are two sentences; “你好。”他说 and 「止まれ！」と are one
        return not run.group("closers") or following in _PAIRS
    # Latin "!", "?" or "." between two CJK characters: すごい!本当? (not Yahoo!ニュース)
    return (run.start() > 0 and _is_cjk(text[run.start() - 1]) and _is_cjk(following)
            and not run.group("closers") and "…" not in stops)


def _abbreviation(text: str, stop: int) -> bool:
    """Whether the word before the period at ``stop`` is an abbreviation: a title, a
    capital initial ("J. R. Smith"), or single letters joined by periods ("U.S.", "e.g.",
    "p.m."). A lone small letter ("plan b.") is a word."""
    begin = stop
    while begin > 0 and (text[begin - 1] == "." or _is_latin_letter(text[begin - 1])):
        begin -= 1
    word = text[begin:stop].lstrip(".")
    if len(word) == 1:
        return word.isupper()
    return word.lower() in _TITLES or (
        "." in word and all(len(letter) == 1 for letter in word.split(".")))


def _is_latin_letter(char: str) -> bool:
    """A letter of a cased alphabet (Latin, Greek, Cyrillic…), not a CJK character."""
    return char.isalpha() and not _is_cjk(char)


def _is_cjk(char: str) -> bool:
    """Han, kana (full and half width) and the iteration and prolonged-sound marks."""
    code = ord(char)
    return (0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x4DBF or 0x4E00 <= code <= 0x9FFF
            or 0xF900 <= code <= 0xFAFF or 0xFF66 <= code <= 0xFF9F or 0x31F0 <= code <= 0x31FF
            or 0x3005 <= code <= 0x3007 or 0x20000 <= code <= 0x3FFFF)


class _Pairs:
    """The bracket pairs of a text. A cut after an opener and up to its closer would
    separate them; each opener pairs with the first closer of its kind at the same depth,
    and one without a partner protects nothing."""

    def __init__(self, text: str) -> None:
        stacks: dict[str, list[int]] = {}
        opened: list[int] = []
        closed: list[int] = []
        for found in _BRACKET.finditer(text):
            char = found.group()
            if char in _PAIRS:
                stacks.setdefault(char, []).append(found.start())
            elif stacks.get(_OPENER[char]):
                opened.append(stacks[_OPENER[char]].pop() + 1)
                closed.append(found.start() + 1)
        self._opened = sorted(opened)
        self._closed = sorted(closed)

    def separate(self, cut: int) -> bool:
        """Whether a cut before character ``cut`` falls inside a pair (log time, so a text
        of a thousand bracketed sentences costs no more per sentence than one)."""
        return bisect.bisect_right(self._opened, cut) > bisect.bisect_right(self._closed, cut)
