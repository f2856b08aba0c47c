"""Stage caches, side by side in one run: what a hit saves against doing the work.

    python -m bench.probes.stages [--quick]

1. Speaker embedding: resemblyzer encoding a Piper clip, against a memory hit and a
   disk hit of the cached embedding (the write-up's "~800 ms → < 1 ms").
2. Prompt features: the CosyVoice and GPT-SoVITS stand-ins (tests/stages/standins.py:
   the real method signatures, small random networks over real STFTs) extracting a
   prompt, against a hit through their adapters.
3. A multi-turn session on a seeded GPT-style decoder: time per turn from scratch
   against continuing from the kept KV state (first turn, later turns).

Needs the [embeddings] and [piper] extras. Figures are medians; torch runs on one
thread so the figures do not depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def row(label: str, ms: float, base: float | None = None) -> None:
    speedup = f"{base / ms:10.0f}x" if base else ""
    print(f"  {label:<52} {ms:12.3f} ms {speedup}")


def piper_clip(root: Path) -> bytes:
    from stages.conftest import DETERMINISTIC, PIPER_LINES, wav_bytes

    from voxcache.cache import Cache
    from voxcache.cached import CachedEngine
    from voxcache.engines.piper import PiperEngine
    from voxcache.request import SynthesisRequest

    cached = CachedEngine(PiperEngine(threads=1), Cache(root / "piper"))
    audio = cached.synthesize(SynthesisRequest(PIPER_LINES[0], params=DETERMINISTIC)).audio
    cached.cache.close()
    return wav_bytes(audio.samples().astype(np.float32) / 32768, audio.sample_rate)


def embeddings(root: Path, clip: bytes, repeat: int) -> None:
    from voxcache.cache import Cache
    from voxcache.stages import Clip, StageCache
    from voxcache.stages.embeddings import SpeakerEmbeddings, SpeakerEncoder

    print(f"1. Speaker embedding (resemblyzer, {len(clip) / 1e3:.0f} KB Piper clip)")
    started = time.perf_counter()
    encoder = SpeakerEncoder()
    load_ms = (time.perf_counter() - started) * 1000
    parsed = Clip.of(clip)
    started = time.perf_counter()
    encoder.embed(parsed.mono(), parsed.sample_rate)
    first_ms = (time.perf_counter() - started) * 1000
    encode = median_ms(lambda: encoder.embed(parsed.mono(), parsed.sample_rate), repeat)
    cache = Cache(root / "emb")
    cached = SpeakerEmbeddings(StageCache(cache), encoder)
    cached.of(clip)

    def disk_hit() -> None:
        cache.in_process.clear()
        assert cached.of(clip).tier == "disk"

    memory = median_ms(lambda: cached.of(clip), repeat * 100)
    disk = median_ms(disk_hit, repeat * 20)
    row("load the encoder (once per process)", load_ms)
    row("first encode in this process", first_ms)
    row("encode (resemblyzer, CPU)", encode)
    row("cached embedding: memory hit (fingerprint + lookup)", memory, encode)
    row("cached embedding: disk hit (read + verify + load)", disk, encode)
    cache.close()


def prompts(root: Path, clip: bytes, repeat: int) -> None:
    from stages.standins import TTS, CosyVoice2

    from voxcache.cache import Cache
    from voxcache.protocols.cosyvoice.prompts import CosyVoicePrompts
    from voxcache.protocols.gpt_sovits.prompts import GPTSoVITSPrompts
    from voxcache.stages import StageCache

    print("2. Prompt features (stand-ins with the engines' signatures; see the docstring)")
    ref = root / "ref.wav"
    ref.write_bytes(clip)
    cache = Cache(root / "prompts")
    stages = StageCache(cache)
    plain, cosy = CosyVoice2(), CosyVoice2()
    CosyVoicePrompts(stages, "cosy-standin").install(cosy.frontend)
    args = ("", "The quick brown fox.", str(ref), 24000, "")
    extract = median_ms(lambda: plain.frontend.frontend_zero_shot(*args), repeat)
    cosy.frontend.frontend_zero_shot(*args)
    memory = median_ms(lambda: cosy.frontend.frontend_zero_shot(*args), repeat * 20)

    def disk() -> None:
        cache.in_process.clear()
        cosy.frontend.frontend_zero_shot(*args)

    row("CosyVoice frontend_zero_shot: extract", extract)
    row("CosyVoice frontend_zero_shot: memory hit", memory, extract)
    row("CosyVoice frontend_zero_shot: disk hit", median_ms(disk, repeat * 5), extract)
    inputs = {"text": "Hello.", "text_lang": "en", "ref_audio_path": str(ref),
              "prompt_text": "The quick brown fox.", "prompt_lang": "en"}
    bare, tts = TTS(), TTS()
    GPTSoVITSPrompts(stages, "gsv-standin").install(tts)

    def bare_extract() -> None:
        bare.prompt_cache["ref_audio_path"] = bare.prompt_cache["prompt_text"] = None
        list(bare.run(dict(inputs)))

    gsv_extract = median_ms(bare_extract, repeat)
    list(tts.run(dict(inputs)))
    row("GPT-SoVITS run, prompt extracted (engine alone)", gsv_extract)
    row("GPT-SoVITS run, prompt from the stage cache", median_ms(
        lambda: list(tts.run(dict(inputs))), repeat * 5), gsv_extract)
    cache.close()


def sessions(root: Path, turns: int) -> None:
    import torch

    from voxcache.cache import Cache
    from voxcache.stages import StageCache
    from voxcache.stages.sessions import SessionStates
    from voxcache.stages.tiny_decoder import Conversation, TinyDecoder

    torch.set_num_threads(1)
    model = TinyDecoder()
    cache = Cache(root / "sessions")
    states = SessionStates(StageCache(cache), "tiny", model.revision)
    voice = [256 + (i * 7) % 64 for i in range(250)]  # a 10 s prompt at 25 tokens/s
    texts = ["What's the weather like today?", "And tomorrow?", "Will it rain on Thursday?",
             "Should I bring an umbrella?", "What about the weekend?", "Thanks, that's all.",
             "One more: is Monday sunny?", "Great, goodbye."][:turns]
    print(f"3. Multi-turn session: {model.revision}, float64, a {len(voice)}-token voice "
          f"prompt, 32 tokens generated per turn")
    kept = Conversation(model, states, "s1", voice, voice="f" * 64)
    warm = Conversation(model, states, "s0", voice, voice="f" * 64)
    warm.say(texts[0])  # the voice prefix is now kept, as after any earlier session
    fresh = Conversation(model, None, "s1", voice)
    print(f"  {'turn':<6}{'history':>9}{'from scratch':>16}{'kept state':>14}{'same tokens':>13}")
    for index, text in enumerate(texts, 1):
        without_tokens, without = fresh.say(text)
        with_tokens, with_state = kept.say(text)
        print(f"  {index:<6}{len(fresh.history):>9}{without * 1000:>13.1f} ms"
              f"{with_state * 1000:>11.1f} ms{str(with_tokens == without_tokens):>13}"
              f"   (read {fresh.read[-1]} vs {kept.read[-1]} positions, "
              f"started from {kept.reused[-1]})")
    cache.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and turns")
    args = parser.parse_args()
    repeat = 3 if args.quick else 7
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        clip = piper_clip(root)
        embeddings(root, clip, repeat)
        prompts(root, clip, repeat)
        sessions(root, 4 if args.quick else 8)


if __name__ == "__main__":
    main()
