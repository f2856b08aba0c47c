"""The sentence splitter against the landed regex and two libraries: cost and exactness.

    python -m bench.probes.sentence_split [--rounds N] [--json]

For each splitter: microseconds per sentence over a paragraph mix of English, Chinese and
Japanese (the same texts for all, in one run, so the ratios are what to read); how many of
the edge cases (``voxcache.testing.sentences.CASES``) it splits as voxcache expects; and how
many texts (cases and paragraphs) break what segment mode relies on (exact, idempotent,
joinable: ``split_problems``). pysbd and sentencex are measured when installed (they are
not dependencies: ``pip install pysbd sentencex``) and get each text's language, which
voxcache's splitter is not told.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import time
from collections.abc import Callable, Sequence

from voxcache.engines.sentences import split_sentences
from voxcache.testing.sentences import CASES, split_problems

_LANDED = re.compile(r"(?<=[.!?。！？])\s+")

PARAGRAPHS = (
    ("en", "Welcome to the store. Today's special is braised pork at $12.50, i.e. half price. "
           "Dr. Lee will see you at 3 p.m. in Room 4. Please scan the code to order. "
           "Thank you!"),
    ("zh", "欢迎光临。今天的特价是红烧肉，只要12.5元！请扫码点餐。会员可以享受九折优惠、"
           "积分和生日礼物。谢谢惠顾。"),
    ("ja", "いらっしゃいませ。本日のおすすめは豚の角煮です！お会計は１，２５０円です。"
           "「ありがとうございます。」またお越しください。"),
)


def _landed(text: str) -> list[str]:
    return [part for part in _LANDED.split(text) if part]


def splitters() -> dict[str, Callable[[str, str], Sequence[str]]]:
    """name → split(language, text), for each splitter importable here."""
    found: dict[str, Callable[[str, str], Sequence[str]]] = {
        "voxcache": lambda _lang, text: split_sentences(text),
        "landed regex": lambda _lang, text: _landed(text),
    }
    try:
        import pysbd

        segmenters: dict[str, pysbd.Segmenter] = {}

        def with_pysbd(lang: str, text: str) -> list[str]:
            seg = segmenters.setdefault(lang, pysbd.Segmenter(
                language=lang, clean=False, char_span=True))
            return [text[span.start:span.end].strip() for span in seg.segment(text)]

        found["pysbd 0.3.4 (spans)"] = with_pysbd
    except ImportError:
        pass
    try:
        import sentencex

        found["sentencex"] = lambda lang, text: [
            part.strip() for part in sentencex.segment(lang, text) if part.strip()]
    except ImportError:
        pass
    return found


def _language(case_language: str) -> str:
    return "en" if case_language == "mixed" else case_language


def measure(rounds: int) -> list[dict[str, object]]:
    rows = []
    texts = [(lang, text) for lang, text in PARAGRAPHS]
    sentences = sum(len(split_sentences(text)) for _lang, text in texts)
    for name, split in splitters().items():
        for lang, text in texts:  # warm up (pysbd builds its rules per language)
            split(lang, text)
        started = time.perf_counter()
        for _ in range(rounds):
            for lang, text in texts:
                split(lang, text)
        seconds = time.perf_counter() - started
        expected = sum(tuple(split(_language(lang), text)) == parts
                       for lang, text, parts in CASES)
        broken = 0
        for lang, text in [(_language(c[0]), c[1]) for c in CASES] + texts:
            broken += bool(split_problems(functools.partial(split, lang), text))
        rows.append({"splitter": name, "us_per_sentence": seconds / rounds / sentences * 1e6,
                     "cases_as_expected": expected, "cases": len(CASES),
                     "texts_breaking_segment_mode": broken,
                     "texts": len(CASES) + len(texts)})
    base = next(r["us_per_sentence"] for r in rows if r["splitter"] == "landed regex")
    for row in rows:
        row["x_landed_regex"] = row["us_per_sentence"] / base  # type: ignore[operator]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.rounds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'splitter':22} {'µs/sentence':>12} {'× landed':>9} {'cases as expected':>18} "
          f"{'texts breaking segment mode':>28}")
    for r in rows:
        print(f"{r['splitter']:22} {r['us_per_sentence']:12.2f} {r['x_landed_regex']:9.1f} "
              f"{r['cases_as_expected']:>11}/{r['cases']:<6} "
              f"{r['texts_breaking_segment_mode']:>21}/{r['texts']}")


if __name__ == "__main__":
    main()
