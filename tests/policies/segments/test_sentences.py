"""The shipped sentence splitter: every script, and exact enough for segment mode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxcache.engines.sentences import split_sentences
from voxcache.testing.sentences import CASES, split_problems


@pytest.mark.parametrize(("language", "text", "expected"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_edge_cases_split_where_a_reader_would(language: str, text: str,
                                               expected: tuple[str, ...]) -> None:
    assert tuple(split_sentences(text)) == expected
    assert split_problems(split_sentences, text) == []


def test_chinese_and_japanese_split_without_spaces_and_keep_commas_inside() -> None:
    assert split_sentences("一、二，三。四；五：六！七？") == [
        "一、二，三。", "四；五：六！", "七？"]
    assert split_sentences("あ､い｡う") == ["あ､い｡", "う"]  # half-width comma and stop


def test_decimals_and_thousands_stay_whole_in_every_width() -> None:
    for text in ("It is 3.14 m.", "It costs 1,000.5 yen.", "値は３．１４です。",
                 "１，０００．５円。", "It is 0.5. Then 2.5."):
        parts = split_sentences(text)
        assert all(not p[0].isdigit() or p == text.split(" ")[0] for p in parts), parts
        assert "".join(parts).replace(" ", "") == text.replace(" ", "")
    assert split_sentences("It is 0.5. Then 2.5.") == ["It is 0.5.", "Then 2.5."]


def test_ellipses_stay_whole_and_only_end_a_sentence_before_a_capital() -> None:
    assert split_sentences("Well... I think so. Hmm… maybe.") == [
        "Well...", "I think so.", "Hmm… maybe."]
    assert split_sentences("他说……然后走了。") == ["他说……然后走了。"]
    assert split_sentences("待って…本当？") == ["待って…本当？"]


def test_a_capital_initial_is_an_abbreviation_and_a_small_letter_a_word() -> None:
    assert split_sentences("Ask J. Smith. Take plan b. Then go.") == [
        "Ask J. Smith.", "Take plan b.", "Then go."]


def test_an_unclosed_bracket_protects_nothing() -> None:
    assert split_sentences("「あ。い。") == ["「あ。", "い。"]
    assert split_sentences("Smile :( then go. Next (really) yes.") == [
        "Smile :( then go.", "Next (really) yes."]
    assert split_sentences("Yes.) No. Go.") == ["Yes.)", "No.", "Go."]


def test_a_stop_inside_brackets_does_not_end_the_sentence_around_them() -> None:
    assert split_sentences("He (Dr. Who. The one.) left. Then.") == [
        "He (Dr. Who. The one.) left.", "Then."]
    assert split_sentences("（注意。）次へ。「はい。」") == ["（注意。）次へ。", "「はい。」"]


def test_whitespace_between_sentences_is_the_only_thing_left_out() -> None:
    text = "  One.\tTwo!\n\nThree?  四。 五。  "
    assert split_sentences(text) == ["One.", "Two!", "Three?", "四。", "五。"]
    assert split_sentences("   ") == [] and split_sentences("") == []
    assert split_sentences("No stop at all") == ["No stop at all"]
    assert split_sentences("...") == ["..."] and split_sentences("。。") == ["。。"]


def test_a_long_text_of_bracketed_sentences_splits_in_one_pass() -> None:
    """1,000 pairs and 1,000 stops: each cut is checked against the pairs by bisection."""
    text = " ".join(["(See it.) Go on."] * 1000)
    assert split_sentences(text) == ["(See it.)", "Go on."] * 1000
    nested = "(" * 2500 + "x. Y." + ")" * 2500
    assert split_sentences(nested) == [nested]


_TRICKY = [*"aZé3９ .!?…。！？｡．、，､「」『』()（）“”\"'’»:あ本ア", "Dr.", "U.S.", "e.g.", "3.14",
           "１．５", "...", "……", "  ", "\t", "Yahoo!", "p.m.", "No. 5", "I", "안녕", "।", "؟"]


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_TRICKY), max_size=40).map("".join))
def test_any_text_splits_exactly_idempotently_and_joinably(text: str) -> None:
    """Segment mode keys parts, re-splits them and renders them joined with a space."""
    assert split_problems(split_sentences, text) == []
