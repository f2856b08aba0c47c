"""The decorator's options: language (never guessed), voice, tenant, segments."""

from __future__ import annotations

import numpy as np
import pytest

from voxcache.cache import Cache
from voxcache.decorator import cached_synthesis
from voxcache.errors import InvalidParameter, UnsupportedFeature
from voxcache.request import SynthesisRequest

RATE = 16000
FRAMES_PER_CHAR = int(0.18 * RATE)
"""About the time a Chinese or Japanese character takes to say."""


def _tone(text: str) -> tuple[np.ndarray, int]:
    """A tone whose pitch differs with the text, so takes can be told apart, about as long as
    speech of the text (a constant or a blip would be a take the storing gate refuses)."""
    frames = int(FRAMES_PER_CHAR * len(text))
    return 0.3 * np.sin(np.arange(frames) * (0.05 + (len(text) % 50) / 500),
                        dtype=np.float32), RATE


def test_a_function_that_does_not_say_its_language_is_refused(cache: Cache) -> None:
    with pytest.raises(TypeError, match="does not guess"):
        @cached_synthesis(cache, engine_id="my-tts", model_revision="v1")
        def speak(text: str, temperature: float = 0.7):
            return _tone(text)


def test_the_language_is_the_functions_own_default(cache: Cache) -> None:
    heard = []

    @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", languages=["zh"])
    def speak(text: str, language: str = "ja_JP", speed: float = 1.0):
        heard.append(language)
        return _tone(text)

    first = speak("こんにちは。")
    payload = speak.cached_engine.explain(SynthesisRequest("こんにちは。"))["payload"]
    assert payload["language"] == "ja-jp" and "language" not in payload["params"]
    assert speak("こんにちは。", language="JA-jp").cache == "hit"  # one language, two spellings
    chinese = speak("こんにちは。", language="zh")
    assert chinese.cache == "miss" and chinese.key != first.key
    assert heard == ["ja_JP", "zh"]  # in the spelling the function declared
    with pytest.raises(UnsupportedFeature, match="does not speak language 'fr'"):
        speak("Bonjour.", language="fr")


def test_the_language_option_keys_a_function_without_a_language_parameter(cache: Cache) -> None:
    @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="zh")
    def speak(text: str):
        return _tone(text)

    assert speak("你好").cache == "miss"
    assert speak.cached_engine.explain(SynthesisRequest("你好"))["payload"]["language"] == "zh"
    assert speak("你好", language="zh").cache == "hit"
    with pytest.raises(UnsupportedFeature):
        speak("你好", language="ja")  # it would be the same audio keyed as Japanese


@pytest.mark.parametrize(("options", "default", "match"), [
    ({"language": "en"}, "ja", "keep one of the two"),
    ({"language": "en", "languages": ["zh"]}, None, "takes no language parameter"),
    ({"language": ""}, None, "non-empty"),
])
def test_contradictory_language_options_are_refused(cache: Cache, options: dict,
                                                    default: str | None, match: str) -> None:
    if default is None:
        def speak(text: str):
            return _tone(text)
    else:
        def speak(text: str, language: str = default):  # type: ignore[misc]
            return _tone(text)
    with pytest.raises(TypeError, match=match):
        cached_synthesis(cache, engine_id="x", model_revision="v1", **options)(speak)


def test_the_voice_option_separates_functions_behind_one_engine_id(cache: Cache) -> None:
    def make(voice: str):
        @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="en",
                          voice=voice)
        def speak(text: str):
            return _tone(text + voice)

        return speak

    anna, ben = make("anna"), make("ben")
    assert anna("Hello.").cache == "miss"
    assert ben("Hello.").cache == "miss"  # another voice: never anna's take
    assert make("anna")("Hello.").cache == "hit"
    assert anna("Hello.").audio.pcm != ben("Hello.").audio.pcm
    assert anna.cached_engine.explain(SynthesisRequest("Hello."))["payload"]["voice"] == "anna"

    with pytest.raises(TypeError, match="takes a voice parameter"):
        @cached_synthesis(cache, engine_id="x", model_revision="v1", language="en", voice="a")
        def both(text: str, voice: str = "b"):
            return _tone(text)


def test_the_tenant_option_walls_takes_off(cache: Cache) -> None:
    def make(tenant: str):
        @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="en",
                          tenant=tenant)
        def speak(text: str):
            return _tone(text)

        return speak

    acme, globex = make("acme"), make("globex")
    assert acme("Your order is ready.").cache == "miss"
    assert globex("Your order is ready.").cache == "miss"
    assert make("acme")("Your order is ready.").cache == "hit"
    assert acme.cached_engine.explain(SynthesisRequest("Hi", tenant="acme"))["payload"][
        "tenant"] == "acme"
    with pytest.raises(InvalidParameter, match="tenant id"):
        make("../other tenant")


def test_segments_call_the_function_per_sentence_and_reuse_sentences(cache: Cache) -> None:
    calls = []

    @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="ja",
                      segments=True, segment_gap=0.1)
    def speak(text: str):
        calls.append(text)
        return _tone(text)

    first = speak("いらっしゃいませ。本日のおすすめは豚の角煮です！")
    assert calls == ["いらっしゃいませ。", "本日のおすすめは豚の角煮です！"]
    frames = FRAMES_PER_CHAR * (len("いらっしゃいませ。") + len("本日のおすすめは豚の角煮です！"))
    assert first.audio.frames == frames + round(0.1 * RATE)  # one gap between the two

    calls.clear()
    second = speak("いらっしゃいませ。またお越しください。")
    assert (second.cache, second.segments_hit, calls) == ("partial", 1, ["またお越しください。"])
    assert speak("またお越しください。").cache == "hit"


def test_without_segments_the_function_hears_the_whole_text(cache: Cache) -> None:
    calls = []

    @cached_synthesis(cache, engine_id="my-tts", model_revision="v1", language="en")
    def speak(text: str):
        calls.append(text)
        return _tone(text)

    speak("One here. Two there.")
    assert calls == ["One here. Two there."]
    with pytest.raises(TypeError, match="segment_gap must be 0 or more"):
        cached_synthesis(cache, engine_id="x", model_revision="v1", language="en",
                         segment_gap=-1)(speak)
