"""Clause segments: reuse below the sentence, for engines that declare it safe.

Agent speech repeats clauses more than sentences ("Thanks for waiting, …"). With
``segments = "clauses"`` each sentence of the engine's own split is cut again at
``, ; : —`` and ``、，；：`` (``split_clauses``); each clause is keyed exactly like a
request of that text, and at each position the longest stored run of clauses wins
(the whole sentence, stored, beats its parts). Missing clauses are rendered alone and
stored; the joins between clauses are made by ``policies.joins``. docs/internals/segments.md,
"Clause segments", has the rules and the measurements against live renders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..engine import Engine
from ..errors import EngineError, UnsupportedFeature
from ..outcome import NO_PROGRESS, Progress, Result
from ..redact import redact
from ..resolved import ResolvedRequest
from . import segments
from .joins import ClauseJoin, pause_profile
from .pipeline import Pipeline
from .segments import Segment

MARKS = ",;:—、，；："
"""Where a clause may end. Latin ``, ; :`` need whitespace after them (``a,b``, ``3:30``
and URLs stay whole); the dash and the CJK marks do not."""
MARK_OF = {"、": ",", "，": ",", "；": ";", "：": ":"}
"""The join a CJK mark makes (its pause is learned under the Latin mark's name)."""
MAX_RUN = 8
"""Clauses of one sentence searched for stored runs (longer sentences: single clauses
beyond the eighth), so a lookup costs at most 36 reads per sentence."""

_OPEN = {'"': '"', "“": "”", "‘": "’", "(": ")", "[": "]", "«": "»", "「": "」",
         "『": "』", "（": "）", "【": "】", "《": "》", "〈": "〉"}
_CLOSE = {close: open_ for open_, close in _OPEN.items()}
_ABBREV = re.compile(r"(?:\b\w\.){2,}$|\b(?:etc|vs|cf|viz|approx|inc|ltd|co|jr|sr|"
                     r"mr|mrs|ms|dr|prof|st|no)\.$", re.IGNORECASE)
_DIGIT = re.compile(r"[0-9０-９]")


def split_clauses(sentence: str) -> list[str]:
    """Cut one sentence into clauses: slices of it, in order, only whitespace left out;
    a clause splits again into itself. Unsure means no cut: a comma between digits
    ("1,000", "1, 2 or 3"), after an abbreviation ("e.g.,"), inside a quoted or bracketed
    span, or leaving a piece with no letter or digit."""
    cuts = [0]
    depth: list[str] = []
    for i, char in enumerate(sentence):
        if depth and char == _OPEN.get(depth[-1]):
            depth.pop()
            continue
        if char in _OPEN and not (char == "'" or (char in _CLOSE and depth)):
            depth.append(char)
            continue
        if depth or char not in MARKS or i + 1 >= len(sentence):
            continue
        if _cuts_after(sentence, i) and _has_word(sentence[cuts[-1]:i]):
            cuts.append(i + 1)
    if depth:  # an unclosed quote or bracket: it protects the rest of the sentence
        cuts = [c for c in cuts if c <= _first_unclosed(sentence)]
    if len(cuts) > 1 and not _has_word(sentence[cuts[-1]:]):
        cuts.pop()  # nothing to say after the last mark ("Yes, …"): no cut there
    cuts.append(len(sentence))
    parts = [sentence[a:b].strip() for a, b in zip(cuts, cuts[1:], strict=False)]
    return [part for part in parts if part] or [sentence.strip()]


def _cuts_after(text: str, i: int) -> bool:
    """Whether the mark at ``i`` ends a clause."""
    char, after = text[i], text[i + 1:].lstrip()
    if not after:
        return False
    if _DIGIT.match(text[i - 1:i] or " ") and _DIGIT.match(after):
        return False  # 1,000 · １，０００ · "1, 2 or 3"
    if char in ",;:":
        if not text[i + 1].isspace():
            return False
        if _ABBREV.search(text[:i]):
            return False
        if text[max(0, i - 3):i].endswith(("...", "…")):
            return False
    return True


def _has_word(piece: str) -> bool:
    return any(c.isalnum() for c in piece)


def _first_unclosed(sentence: str) -> int:
    """Where the first opener that is never closed stands."""
    stack: list[int] = []
    for i, char in enumerate(sentence):
        if stack and char == _OPEN.get(sentence[stack[-1]]):
            stack.pop()
        elif char in _OPEN and not (char in _CLOSE and stack):
            stack.append(i)
    return stack[0] if stack else len(sentence)


def check_mode(engine: Engine, mode: bool | str) -> None:
    """Refuse a segment mode the engine cannot take (sentences, then clauses)."""
    segments.check_engine(engine)
    if mode == segments.CLAUSES:
        check_engine(engine)


def check_engine(engine: Engine) -> None:
    """Refuse clause segments for an engine that does not declare them safe."""
    if not getattr(engine, "clause_safe", False):
        raise UnsupportedFeature(
            f'segments = "clauses" is unavailable for engine {engine.id!r}: it does not '
            "declare clause_safe (that a clause rendered alone sounds like the same clause "
            'inside its sentence); use segments = "sentences" (or on) for this engine')


@dataclass(frozen=True, slots=True)
class Piece:
    """A stored or missing run of clauses: its segment, and the mark that joins it to the
    next piece ("" where the next piece starts a new sentence, or nothing follows)."""

    segment: Segment
    mark: str


def plan(pipeline: Pipeline, resolved: ResolvedRequest) -> list[Piece] | None:
    """The pieces of ``resolved``: per sentence, from each clause the longest run of
    clauses stored (else that clause alone, to be rendered); None when the request should
    stay whole (fewer than two pieces, or an engine that cannot say its sentences)."""
    engine = pipeline.engine
    try:
        sentences = engine.split_sentences(resolved.text)
    except Exception as exc:  # the engine's own splitter is engine code
        raise EngineError(f"engine {engine.id!r} could not split the text into sentences: "
                          f"{redact(str(exc))}") from exc
    if not sentences:
        return None
    runs: list[tuple[str, str]] = []  # (text, mark after it)
    for sentence in sentences:
        runs += _runs(pipeline, resolved, sentence)
    if len(runs) < 2:
        return None
    pieces = []
    for index, (text, mark) in enumerate(runs):
        part = replace(resolved, text=text)
        pieces.append(Piece(Segment(index, part, pipeline.key_of(part)), mark))
    return pieces


def _runs(pipeline: Pipeline, resolved: ResolvedRequest,
          sentence: str) -> list[tuple[str, str]]:
    """One sentence as (text, mark after it) pieces: longest stored run first."""
    clauses = split_clauses(sentence)
    engine = pipeline.engine
    if len(clauses) == 1 or any(engine.split_sentences(c) != [c] for c in clauses):
        return [(sentence, "")]  # a clause the engine would cut again: the sentence stays whole
    starts, at = [], 0
    for clause in clauses:
        at = sentence.index(clause, at)
        starts.append(at)
        at += len(clause)
    ends = [s + len(c) for s, c in zip(starts, clauses, strict=True)]
    pieces: list[tuple[str, str]] = []
    i = 0
    while i < len(clauses):
        j = i
        for last in range(min(len(clauses), i + MAX_RUN) - 1, i, -1):
            text = sentence[starts[i]:ends[last]]
            if pipeline.lookup(pipeline.key_of(replace(resolved, text=text))) is not None:
                j = last
                break
        text = sentence[starts[i]:ends[j]]
        mark = "" if j == len(clauses) - 1 else MARK_OF.get(text[-1], text[-1])
        pieces.append((text, mark))
        i = j + 1
    return pieces


def serve(pipeline: Pipeline, resolved: ResolvedRequest, key: str, started: float,
          progress: Progress = NO_PROGRESS, refusal: str | None = None,
          caller: str | None = None) -> tuple[Result, bool] | None:
    """A whole-request miss served from clause pieces (``segments.serve`` with the clause
    join rule), and whether its take may be stored under the request key: only when every
    join is a sentence join (then it is the engine's own take); a take with a clause join
    is made again from its stored clauses each time, so a stitched take never stands in
    for the engine's own under the request's key. None: the request stays whole."""
    pieces = plan(pipeline, resolved)
    if pieces is None:
        return None
    marks = [p.mark for p in pieces]
    gap = pipeline.engine.segment_gap
    rule = None
    if any(marks):
        pauses = pause_profile(pipeline, resolved)
        rule = lambda: ClauseJoin(marks, pauses, gap)  # noqa: E731 - a fresh rule per use
    result = segments.serve(pipeline, resolved, key, started, [p.segment for p in pieces],
                            progress, refusal, caller, rule)
    if result is None:
        return None
    if any(marks):
        pipeline.count("clause_stitches")
    return result, not any(marks)


def serve_mode(pipeline: Pipeline, mode: bool | str, resolved: ResolvedRequest, key: str,
               started: float, progress: Progress, refusal: str | None,
               caller: str | None) -> tuple[Result, bool] | None:
    """A whole-request miss in segment mode ``mode``: (result, whether to store it whole)."""
    if mode == segments.CLAUSES:
        return serve(pipeline, resolved, key, started, progress, refusal, caller)
    result = segments.serve(pipeline, resolved, key, started, progress=progress,
                            refusal=refusal, caller=caller)
    return None if result is None else (result, True)
