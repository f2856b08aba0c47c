"""A fresh clone runs its tests and benchmarks with nothing beside it.

The hot phrases were read from ``../shared/data`` (or ``/work/shared``) by five modules, so a
clone anywhere else failed three admission and CLI tests; the repository keeps its copy in
``examples/`` and everything reads it from there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.helpers.fixtures import HOT_PHRASES

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"""/work/|parents\[\d\]\s*/\s*["']shared["']|\.\./shared""")


def test_no_test_or_benchmark_reads_beside_the_repository() -> None:
    found = [f"{path.relative_to(REPO)}:{number}"
             for folder in ("tests", "bench", "src", "scripts")
             for path in sorted((REPO / folder).rglob("*.py")) if path != Path(__file__)
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert found == []


def test_the_hot_phrases_are_in_the_repository() -> None:
    assert REPO in HOT_PHRASES.parents
    phrases = json.loads(HOT_PHRASES.read_text(encoding="utf-8"))["phrases"]
    assert len(phrases) >= 20 and all(p["text"].strip() for p in phrases)
