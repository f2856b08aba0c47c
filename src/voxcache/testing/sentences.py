"""What segment mode needs from a sentence split, as checks and cases to run any split on.

``split_problems(split, text)`` lists how a split breaks segment mode's assumptions
(empty list: none), for voxcache's own splitter, an engine's, or a library being
evaluated (``bench/probes/sentence_split.py``); ``CASES`` are the edge cases every script
brings, with the split voxcache's splitter gives (docs/internals/segments.md explains each rule).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

Split = Callable[[str], Sequence[str] | None]

CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # English: abbreviations, initials, decimals, thousands, ellipses, quotes, brackets
    ("en", "Dr. Smith arrived at 3.14 p.m. today. He paid $1,000.5 for it.",
     ("Dr. Smith arrived at 3.14 p.m. today.", "He paid $1,000.5 for it.")),
    ("en", "Bring tools, e.g. hammers and saws. I.e. the usual. Then start.",
     ("Bring tools, e.g. hammers and saws.", "I.e. the usual.", "Then start.")),
    ("en", "The U.S. Army is big. Mr. and Mrs. Jones met J. R. Smith in St. Louis.",
     ("The U.S. Army is big.", "Mr. and Mrs. Jones met J. R. Smith in St. Louis.")),
    ("en", "See No. 5 and Fig. 3 on p. 12. Pi is about 3.14159. Really?! Yes!!",
     ("See No. 5 and Fig. 3 on p. 12.", "Pi is about 3.14159.", "Really?!", "Yes!!")),
    ("en", "I waited... Then he came. Wait... what? Fine…",
     ("I waited...", "Then he came.", "Wait... what?", "Fine…")),
    ("en", 'He said "Stop!" Then he left. "Go!" he shouted.',
     ('He said "Stop!"', "Then he left.", '"Go!" he shouted.')),
    ("en", "She said, “It’s late. We should go.” Then she left. (See above.) Next.",
     ("She said, “It’s late. We should go.”", "Then she left.", "(See above.)", "Next.")),
    ("en", "Visit example.com today. Version 2.0 is out.",
     ("Visit example.com today.", "Version 2.0 is out.")),
    # Chinese: no spaces, 、， inside, decimals and thousands, quotes, ellipsis, full width
    ("zh", "你好。今天天气很好！你要去哪里？我去北京、上海，还有广州。",
     ("你好。", "今天天气很好！", "你要去哪里？", "我去北京、上海，还有广州。")),
    ("zh", "圆周率是3.14。一共1,000.5元。价格是１，０００．５元。",
     ("圆周率是3.14。", "一共1,000.5元。", "价格是１，０００．５元。")),
    ("zh", "他说：“你好。”然后走了。“早上好。”“晚上好！”",
     ("他说：“你好。”然后走了。", "“早上好。”", "“晚上好！”")),
    ("zh", "我不知道……他走了。真的吗？！是的。。",
     ("我不知道……他走了。", "真的吗？！", "是的。。")),
    # Japanese: no spaces, 「」, full-width and half-width stops, half-width !? between kana
    ("ja", "こんにちは。今日はいい天気ですね！どこへ行きますか？",
     ("こんにちは。", "今日はいい天気ですね！", "どこへ行きますか？")),
    ("ja", "「止まれ！」と彼は言った。「おはよう。」「おはようございます。」",
     ("「止まれ！」と彼は言った。", "「おはよう。」", "「おはようございます。」")),
    ("ja", "これはペンです．それは本です．値は３．１４です．",
     ("これはペンです．", "それは本です．", "値は３．１４です．")),
    ("ja", "すごい!本当?うん｡わかった｡東京、大阪、名古屋に行きました。",
     ("すごい!", "本当?", "うん｡", "わかった｡", "東京、大阪、名古屋に行きました。")),
    ("ja", "Yahoo!ニュースを見た。U.S.の経済は大きい。e.g.の使い方。",
     ("Yahoo!ニュースを見た。", "U.S.の経済は大きい。", "e.g.の使い方。")),
    # mixed scripts
    ("mixed", "Hello world. こんにちは。Good bye. 再见！OK?",
     ("Hello world.", "こんにちは。", "Good bye.", "再见！", "OK?")),
    ("mixed", "会議は3.5時間です。The meeting is 3.5 hours. 了解です。",
     ("会議は3.5時間です。", "The meeting is 3.5 hours.", "了解です。")),
)


def split_problems(split: Split, text: str) -> list[str]:
    """How ``split`` breaks what segment mode relies on, for ``text`` (none: ``[]``).

    - exact: the parts are non-empty slices of ``text`` in order, with nothing but
      whitespace around and between them (no character lost, added or changed);
    - idempotent: splitting a part again gives that part;
    - joinable: the parts joined with one space split into the same parts (segment mode
      renders several missing sentences as one call on that joined text).
    """
    parts = split(text)
    if parts is None:
        return []
    parts = list(parts)
    problems = []
    pattern = r"\s*" + r"\s*".join(f"({re.escape(p)})" for p in parts) + r"\s*"
    if any(not p or p != p.strip() for p in parts) or not re.fullmatch(pattern, text):
        problems.append(f"not exact: {parts!r}")
    for part in parts:
        again = split(part)
        if again is not None and list(again) != [part]:
            problems.append(f"not idempotent: {part!r} splits into {list(again)!r}")
    joined = split(" ".join(parts))
    if joined is not None and list(joined) != parts:
        problems.append(f"not joinable: {' '.join(parts)!r} splits into {list(joined)!r}")
    return problems
