"""Keys change with everything that shapes the audio, and with nothing else."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import soundfile

from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.errors import InvalidParameter, UnsupportedFeature
from voxcache.request import SynthesisRequest as R


def clip(seed: int = 0, fmt: str = "WAV", seconds: float = 0.5, title: str = "") -> bytes:
    """A 16-bit clip; the same seed gives the same PCM in any container."""
    rng = np.random.default_rng(seed)
    samples = (rng.standard_normal(int(16000 * seconds)) * 3000).astype(np.int16)
    buf = io.BytesIO()
    with soundfile.SoundFile(buf, "w", 16000, 1, "PCM_16", format=fmt) as f:
        if title:
            f.title = title
        f.write(samples)
    return buf.getvalue()


@pytest.fixture
def keyer(cache):
    return CachedEngine(ToneEngine(), cache)


def key(keyer: CachedEngine, request: R) -> str:
    return keyer.key_of(keyer.resolve(request))


BASE = R("Welcome, please scan the code.", voice="alto")

CHANGES = {
    "text case": R("welcome, please scan the code.", voice="alto"),
    "punctuation": R("Welcome, please scan the code!", voice="alto"),
    "digits": R("Welcome, please scan the code 2.", voice="alto"),
    "voice": R("Welcome, please scan the code.", voice="bass"),
    "instruct": R("Welcome, please scan the code.", voice="alto", instruct="cheerful"),
    "seed": R("Welcome, please scan the code.", voice="alto", seed=7),
    "speed": R("Welcome, please scan the code.", voice="alto", speed=1.25),
    "language": R("Welcome, please scan the code.", voice="alto", language="zh"),
    "declared parameter": R("Welcome, please scan the code.", voice="alto", params={"pitch": 2}),
    "tenant": R("Welcome, please scan the code.", voice="alto", tenant="acme"),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_key_changes_with_each_waveform_input(keyer, what):
    assert key(keyer, CHANGES[what]) != key(keyer, BASE)


SAME = {
    "surrounding whitespace": R("  Welcome, please scan the code.\n", voice="alto"),
    "repeated whitespace": R("Welcome,   please\tscan the code.", voice="alto"),
    "explicit default parameter": R("Welcome, please scan the code.", voice="alto",
                                    params={"pitch": 1.0}),
    "int for float": R("Welcome, please scan the code.", voice="alto", params={"pitch": 1}),
    "explicit default speed": R("Welcome, please scan the code.", voice="alto", speed=1),
    "default voice omitted": R("Welcome, please scan the code."),
    "seed -1 means unseeded": R("Welcome, please scan the code.", voice="alto", seed=-1),
    "non-waveform parameter": R("Welcome, please scan the code.", voice="alto",
                                params={"delay": 0.5}),
    "language alias": R("Welcome, please scan the code.", voice="alto", language="en_US"),
}


@pytest.mark.parametrize("what", sorted(SAME))
def test_key_ignores_what_cannot_be_heard(keyer, what):
    assert key(keyer, SAME[what]) == key(keyer, BASE)


def test_nfc_and_nfd_spellings_share_a_key(keyer):
    text = "Café crème brûlée"
    nfd = unicodedata.normalize("NFD", text)
    assert nfd != text
    assert key(keyer, R(nfd)) == key(keyer, R(text))


def test_parameter_order_does_not_matter(keyer):
    a = R("hi", params={"pitch": 1.5, "delay": 0.0})
    b = R("hi", params={"delay": 0.0, "pitch": 1.5})
    assert key(keyer, a) == key(keyer, b)


def test_model_revision_changes_the_key(cache):
    old = CachedEngine(ToneEngine(model_revision="r1"), cache)
    new = CachedEngine(ToneEngine(model_revision="r2"), cache)
    assert key(old, BASE) != key(new, BASE)


def test_reference_audio_keyed_by_content_not_bytes(keyer):
    wav = clip(1)
    a = R("hi", reference_audio=wav, prompt_text="hello there")
    for resaved in (clip(1, fmt="FLAC"), clip(1, title="re-saved by an editor")):
        assert resaved != wav  # other bytes, same PCM
        b = R("hi", reference_audio=resaved, prompt_text="hello there")
        assert key(keyer, a) == key(keyer, b)
    other_clip = R("hi", reference_audio=clip(2), prompt_text="hello there")
    other_prompt = R("hi", reference_audio=wav, prompt_text="hello here")
    assert key(keyer, other_clip) != key(keyer, a)
    assert key(keyer, other_prompt) != key(keyer, a)


def test_undeclared_parameter_is_refused_with_the_accepted_list(keyer):
    with pytest.raises(InvalidParameter, match="accepts: delay, pitch"):
        keyer.resolve(R("hi", params={"temperature": 0.7}))


@pytest.mark.parametrize("bad", [{"pitch": 100}, {"pitch": "high"}, {"pitch": float("nan")}])
def test_out_of_range_or_mistyped_parameter_is_refused(keyer, bad):
    with pytest.raises(InvalidParameter, match="pitch"):
        keyer.resolve(R("hi", params=bad))


def test_piper_refuses_what_it_cannot_honour(piper, cache):
    cached = CachedEngine(piper, cache)
    with pytest.raises(UnsupportedFeature, match="cannot clone"):
        cached.resolve(R("hi", reference_audio=clip(1)))
    with pytest.raises(UnsupportedFeature, match="instruct"):
        cached.resolve(R("hi", instruct="whisper"))


def test_piper_speed_and_parameters_change_the_key(piper, cache):
    cached = CachedEngine(piper, cache)
    base = key(cached, R("hi"))
    for params in ({"length_scale": 1.1}, {"noise_scale": 0.0}, {"noise_w_scale": 0.0}):
        assert key(cached, R("hi", params=params)) != base
    assert key(cached, R("hi", speed=1.5)) != base
    assert key(cached, R("hi", voice="joe")) == base  # an alias of the same voice


KEY_SCRIPT = (
    "from voxcache.cache import Cache; from voxcache.cached import CachedEngine;"
    "from voxcache.engines.tone import ToneEngine; from voxcache.request import SynthesisRequest;"
    "import sys; c = CachedEngine(ToneEngine(), Cache(sys.argv[1]));"
    "print(c.key_of(c.resolve(SynthesisRequest('Hello, world.', params={'pitch': 1.5},"
    " seed=3))))"
)


def test_keys_are_identical_across_processes_and_hash_seeds(keyer, tmp_path):
    expected = key(keyer, R("Hello, world.", params={"pitch": 1.5}, seed=3))
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", KEY_SCRIPT, str(tmp_path / hash_seed)],
                             env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected


def test_golden_key_guards_the_schema(keyer):
    """Changing what a key covers must come with a KEY_SCHEMA_VERSION bump (and a new golden)."""
    assert key(keyer, R("Hello, world.", params={"pitch": 1.5}, seed=3)) == GOLDEN


GOLDEN = "e3e354013a8fc680292de2c5fd5b7c6e6ef10c400a22231e6016e40cca120b86"
