"""Resolution refuses what no engine can take, by name and position, before anything is keyed:
control characters, text with nothing to speak, numbers that are not finite."""

from __future__ import annotations

import json
import math

import pytest

from voxcache.errors import InvalidParameter
from voxcache.key import digest, key_payload
from voxcache.request import SynthesisRequest, resolve

# Every code point of Unicode category Cc that is not Unicode whitespace.
REFUSED_CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0E, 0x20),
                                      *range(0x7F, 0x85), *range(0x86, 0xA0))]

NON_FINITE = [math.nan, math.inf, -math.inf, 10 ** 400]


def refused(tone, message_words: tuple[str, ...], **fields) -> None:
    with pytest.raises(InvalidParameter) as caught:
        resolve(SynthesisRequest(**fields), tone)
    for word in message_words:
        assert word in str(caught.value), str(caught.value)


@pytest.mark.parametrize("char", REFUSED_CONTROLS, ids=lambda c: f"U+{ord(c):04X}")
def test_every_control_character_is_refused_with_its_code_point_and_position(tone,
                                                                              char: str) -> None:
    refused(tone, (f"U+{ord(char):04X}", "position 6"), text=f"Hello {char}world")


@pytest.mark.parametrize("field", ["prompt_text", "instruct"])
def test_control_characters_in_the_other_text_fields_are_refused_by_name(tone,
                                                                         field: str) -> None:
    import io

    import numpy as np
    import soundfile

    clip = io.BytesIO()
    soundfile.write(clip, np.zeros(1600, dtype="float32") + 0.1, 16000, format="WAV")
    extra = {"reference_audio": clip.getvalue()} if field == "prompt_text" else {}
    refused(tone, (field, "U+0000", "position 2"), text="Hello.", **extra,
            **{field: "ab\x00c"})


def test_whitespace_controls_fold_like_spaces(tone) -> None:
    folded = resolve(SynthesisRequest("One.\tTwo.\r\nThree.\x0bFour.\x0cFive.\x85Six."), tone)
    assert folded.text == "One. Two. Three. Four. Five. Six."


def test_lone_surrogates_are_refused(tone) -> None:
    refused(tone, ("unpaired surrogate", "U+DC00", "position 2"), text="ok\udc00")


@pytest.mark.parametrize("text", ["...", "?!", "…", "— –", "¿¡", "「」。", "( )", "\u200b",
                                  "\u0301\u0301", "\u3000.\u3000"])
def test_text_with_nothing_to_speak_is_refused(tone, text: str) -> None:
    refused(tone, ("nothing to speak",), text=text)


@pytest.mark.parametrize("text", [
    "你好", "こんにちは", "مرحبا", "Привет", "नमस्ते", "สวัสดี", "안녕하세요", "שלום",
    "7", "½", "Ⅻ", "$", "€", "+", "©", "°", "😀", "👍🏽",
    "\U0001FAE8",  # an emoji newer than Python 3.11's Unicode tables (unassigned there)
    "...and then", "'quoted'", "e\u0301",
])
def test_letters_digits_and_symbols_of_any_script_are_speakable(tone, text: str) -> None:
    assert resolve(SynthesisRequest(text), tone).text


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf", "10**400"])
def test_ttl_must_be_finite(tone, value) -> None:
    refused(tone, ("ttl", "finite"), text="Hi.", ttl=value)


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf", "10**400"])
def test_speed_must_be_finite(tone, value) -> None:
    refused(tone, ("speed", "finite"), text="Hi.", speed=value)


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf", "10**400"])
def test_params_must_be_finite(tone, value) -> None:
    refused(tone, ("'pitch'", "finite"), text="Hi.", params={"pitch": value})


def test_finite_values_still_resolve_and_key(tone) -> None:
    resolved = resolve(SynthesisRequest("Hi.", ttl=3600, speed=2, params={"pitch": 2}), tone)
    assert (resolved.ttl, resolved.speed, resolved.params["pitch"]) == (3600.0, 2.0, 2.0)
    assert json.loads(json.dumps(key_payload(resolved), allow_nan=False))  # strict JSON
    assert len(digest(key_payload(resolved))) == 64
