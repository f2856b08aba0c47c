"""``python -m bench.probes.onnx_spinning [BUSY]``: what onnxruntime's spinning threads cost.

onnxruntime's intra-op threads spin for more work between operators unless told not to
(``session.intra_op.allow_spinning``); the Piper engine turns that off. This renders the same
sentences with spinning on and off, in fresh processes taking turns round by round, beside
``BUSY`` processes spinning on the CPU (default 2: a host that is doing other work), and
prints each side's CPU and wall seconds and whether the audio was the same bytes.
"""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
import time

ROUNDS = 3
RENDERS = 5
TEXT = ("Attention please, the train to Central Station will depart from platform four in "
        "five minutes.")


def one_side(spinning: str) -> str:
    """Load the bundled voice as the engine does, at two threads, with ``spinning`` ("0"/"1");
    render ``TEXT`` ``RENDERS`` times at zero noise; "cpu wall digest"."""
    from piper.config import SynthesisConfig

    from voxcache.engines.piper import default_model_path, session_options, voice_with

    options = session_options(2)  # the engine's, spinning off; "1" overrides it
    options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    voice = voice_with(default_model_path(), options)
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)

    def render() -> bytes:
        return b"".join(c.audio_int16_bytes for c in voice.synthesize(TEXT, syn_config=config))

    render()  # warm-up
    wall, cpu = time.monotonic(), time.process_time()
    for _ in range(RENDERS):
        audio = render()
    return (f"{time.process_time() - cpu} {time.monotonic() - wall} "
            f"{hashlib.sha256(audio).hexdigest()}")


def main(busy: int) -> None:
    """Interleave the two sides over ``ROUNDS`` rounds beside ``busy`` spinning processes."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    results: dict[str, list[tuple[float, float, str]]] = {"1": [], "0": []}
    try:
        for _ in range(ROUNDS):
            for spinning in results:
                out = subprocess.run(
                    [sys.executable, "-c", "from bench.probes.onnx_spinning import one_side; "
                     f"print(one_side({spinning!r}))"],
                    capture_output=True, text=True, check=True).stdout.split()[-3:]
                results[spinning].append((float(out[0]), float(out[1]), out[2]))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"{RENDERS} renders of one sentence per round, {ROUNDS} rounds, {busy} busy "
          "processes beside them (medians of rounds):")
    for spinning, rounds in results.items():
        print(f"  allow_spinning={spinning}: {statistics.median(r[0] for r in rounds):.2f} CPU-s,"
              f" {statistics.median(r[1] for r in rounds):.2f} s wall")
    cpu = {s: statistics.median(r[0] for r in rounds) for s, rounds in results.items()}
    digests = {r[2] for rounds in results.values() for r in rounds}
    print(f"CPU spinning ÷ not: {cpu['1'] / cpu['0']:.2f}; "
          f"{'the same bytes' if len(digests) == 1 else 'DIFFERENT BYTES'} on both sides")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
